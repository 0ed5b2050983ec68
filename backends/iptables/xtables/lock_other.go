//go:build !linux

package xtables

import (
	"context"
	"errors"
	"time"
)

// lockFile fails: iptables is a Linux facility.
func lockFile(context.Context, string, time.Duration, time.Duration) (func(), error) {
	return nil, errors.New("the xtables lock is a Linux facility")
}
