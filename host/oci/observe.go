package oci

import (
	"context"
	"errors"
	"net"
	"net/http"

	"oras.land/oras-go/v2/registry/remote/errcode"
)

// Observer is told what a Client does, for metrics (Options.Observer). Its
// methods are called on the goroutine of the Pull that reports, and must
// be quick and safe for concurrent use.
type Observer interface {
	// Pulled reports a Pull's outcome: PullPulled, PullCached, or the class
	// of its error (see PullResultOf).
	Pulled(result PullResult)
	// BlobCache reports a look-up of one of a module's blobs (manifest,
	// config, layer) in the cache: hit if the cache served it, else it
	// was fetched from the registry. Pulls without a cache report none.
	BlobCache(hit bool)
}

// PullResult is the outcome of a Pull, a closed set for a metric label.
type PullResult string

const (
	// PullPulled: the module was pulled, at least one blob from the
	// registry.
	PullPulled PullResult = "pulled"
	// PullCached: every blob came from the node-local cache, the
	// registry not contacted for them (a restart, a swap back) or down.
	PullCached PullResult = "cached"
	// PullNotFound: the registry has no such manifest, blob or tag
	// (ErrNotFound).
	PullNotFound PullResult = "not-found"
	// PullUnauthorized: the registry refused the credentials, or there
	// were none (ErrUnauthorized).
	PullUnauthorized PullResult = "unauthorized"
	// PullDigestMismatch: the registry served other content than the
	// digest asked for (ErrDigestMismatch).
	PullDigestMismatch PullResult = "digest-mismatch"
	// PullSignature: no trusted signature (ErrNoSignature,
	// ErrBadSignature, ErrSignatureMismatch, ErrMalformedSignature).
	PullSignature PullResult = "signature"
	// PullInvalid: the reference or the artifact is not one Pull takes
	// (ErrNotPinned, ErrNotWasm, ErrTooLarge).
	PullInvalid PullResult = "invalid"
	// PullUnavailable: the registry could not be reached, answered with a
	// server error or throttled, or the pull timed out; the module was not
	// cached.
	PullUnavailable PullResult = "unavailable"
	// PullError: any other failure.
	PullError PullResult = "error"
)

// PullResults lists every PullResult, for exporting metric series at zero.
var PullResults = []PullResult{PullPulled, PullCached, PullNotFound, PullUnauthorized, PullDigestMismatch, PullSignature, PullInvalid, PullUnavailable, PullError}

// pullClasses map the errors a caller may act on to their PullResult, in
// the order they are looked for: a signature failure names the digest
// mismatch or the missing manifest it came from, and wins.
var pullClasses = []struct {
	err    error
	result PullResult
}{
	{ErrNoSignature, PullSignature},
	{ErrBadSignature, PullSignature},
	{ErrSignatureMismatch, PullSignature},
	{ErrMalformedSignature, PullSignature},
	{ErrDigestMismatch, PullDigestMismatch},
	{ErrUnauthorized, PullUnauthorized},
	{ErrNotFound, PullNotFound},
	{ErrNotPinned, PullInvalid},
	{ErrNotWasm, PullInvalid},
	{ErrTooLarge, PullInvalid},
}

// PullResultOf returns the outcome of a Pull that returned a and err.
func PullResultOf(a *Artifact, err error) PullResult {
	switch {
	case err == nil && a.Cached:
		return PullCached
	case err == nil:
		return PullPulled
	}
	for _, c := range pullClasses {
		if errors.Is(err, c.err) {
			return c.result
		}
	}
	var (
		resp *errcode.ErrorResponse
		nerr net.Error
	)
	switch {
	case errors.As(err, &resp) && (resp.StatusCode >= http.StatusInternalServerError || resp.StatusCode == http.StatusTooManyRequests),
		errors.As(err, &nerr), errors.Is(err, context.DeadlineExceeded):
		return PullUnavailable
	}
	return PullError
}

// observePull tells the Observer, if any, a Pull's outcome.
func (c *Client) observePull(a *Artifact, err error) {
	if o := c.opts.Observer; o != nil {
		o.Pulled(PullResultOf(a, err))
	}
}

// observeBlobCache tells the Observer, if any, of a look-up in the cache.
func (c *Client) observeBlobCache(hit bool) {
	if o := c.opts.Observer; o != nil {
		o.BlobCache(hit)
	}
}
