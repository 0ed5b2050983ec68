package snapshot

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/host/objects"
)

// DefaultPollInterval is a sensible Opts.PollInterval for people editing
// the files by hand.
const DefaultPollInterval = time.Second

// highWater is how many undelivered events a watcher may hold before the
// Source waits for it to drain: half of the fake watcher's buffer, which
// panics when full. (watch.DefaultChanSize is a variable.)
var highWater = int(watch.DefaultChanSize) / 2

// Opts configure a Source.
type Opts struct {
	// Path is a YAML or JSON file, or a directory of them. Required.
	Path string
	// PollInterval is how often Run looks for changed files. Optional: 0
	// means the files are read once, by New, and Run returns at once.
	PollInterval time.Duration
}

// Source serves the objects of a snapshot through a fake clientset. Create
// it with New, give Client to the proxy and, to follow edits, run Run.
type Source struct {
	opts   Opts
	client *fake.Clientset

	mu       sync.Mutex
	watchers []*watch.RaceFreeFakeWatcher // the clientset's live watches

	// Owned by New, then by Run's goroutine.
	stamp      string          // the files' fingerprint when last read
	failed     string          // the fingerprint whose read failed, logged once
	objects    map[key]applied // what the clientset holds
	reads      int             // successful reads, for tests
	lastChange Changes
}

// key identifies an object.
type key struct {
	kind            string // Node, Service or EndpointSlice
	namespace, name string
}

func (k key) String() string {
	if k.namespace == "" {
		return fmt.Sprintf("%s %q", k.kind, k.name)
	}
	return fmt.Sprintf("%s %q", k.kind, k.namespace+"/"+k.name)
}

// kindOrder orders creates and updates; deletes go the other way.
var kindOrder = map[string]int{"Node": 0, "Service": 1, "EndpointSlice": 2}

func compareKeys(a, b key) int {
	return cmp.Or(cmp.Compare(kindOrder[a.kind], kindOrder[b.kind]),
		cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
}

// object is an object read from a file.
type object struct {
	obj  runtime.Object
	file string
}

// applied is what the Source remembers of an object it wrote: a digest of
// its JSON form to tell whether the next read changed it, and its file for
// errors. Not the object: the clientset's tracker and the informers
// already hold two copies of every object, and at 10k Services a third
// costs 30 MB.
type applied struct {
	sum  [sha256.Size]byte
	file string
}

// digest returns the sha256 of o's JSON form. Kubernetes types encode
// deterministically (struct fields in order, map keys sorted), and
// quantities in canonical form, so equal objects have equal digests; an
// object the encoder refuses gets a zero digest, which matches none.
func digest(o runtime.Object) [sha256.Size]byte {
	b, err := json.Marshal(o)
	if err != nil {
		return [sha256.Size]byte{}
	}
	return sha256.Sum256(b)
}

// Changes count what one read applied to the clientset.
type Changes struct {
	Created, Updated, Deleted int
}

// New reads the snapshot at opts.Path and returns a Source whose clientset
// holds its objects.
func New(opts Opts) (*Source, error) { return newSource(opts, nil) }

// newSource is New with a reactor that sees every action of the clientset
// first (tests record the writes with it; the clientset forgets them).
func newSource(opts Opts, observe k8stesting.ReactionFunc) (*Source, error) {
	if opts.Path == "" {
		return nil, errors.New("snapshot: path: required")
	}
	if opts.PollInterval < 0 {
		return nil, fmt.Errorf("snapshot: pollInterval: %v is negative", opts.PollInterval)
	}
	// NewSimpleClientset, not NewClientset: its tracker stores objects as
	// given, without the field management that server-side apply needs
	// and that costs 2 MB more of binary.
	s := &Source{opts: opts, client: fake.NewSimpleClientset(), objects: map[key]applied{}}
	s.client.PrependWatchReactor("*", s.watch)
	if observe != nil {
		s.client.PrependReactor("*", "*", observe)
	}

	stamp, err := fingerprint(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	want, err := read(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if _, err := s.apply(context.Background(), want); err != nil {
		return nil, fmt.Errorf("snapshot: %s: %w", opts.Path, err)
	}
	s.stamp = stamp
	s.reads++
	return s, nil
}

// Client returns the clientset serving the snapshot.
func (s *Source) Client() kubernetes.Interface { return s.client }

// Run polls the files every PollInterval until ctx is done, applying every
// change to the clientset. It never returns an error: a snapshot that
// fails to read is logged once and skipped. With PollInterval 0 it returns
// at once.
func (s *Source) Run(ctx context.Context) {
	if s.opts.PollInterval == 0 {
		return
	}
	logger := klog.FromContext(ctx).WithValues("source", s.opts.Path)
	ctx = klog.NewContext(ctx, logger)
	t := time.NewTicker(s.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.poll(ctx)
		}
	}
}

// poll reads the snapshot again if its files changed, and applies the
// difference.
func (s *Source) poll(ctx context.Context) {
	logger := klog.FromContext(ctx)
	stamp, err := fingerprint(s.opts.Path)
	if err == nil && stamp == s.stamp {
		return
	}
	if err == nil {
		var want map[key]object
		if want, err = read(s.opts.Path); err == nil {
			var c Changes
			c, err = s.apply(ctx, want)
			s.lastChange = c
			if err == nil {
				s.stamp, s.failed = stamp, ""
				s.reads++
				if c == (Changes{}) {
					logger.V(2).Info("Snapshot files changed, their objects did not")
					return
				}
				logger.Info("Snapshot changed", "created", c.Created, "updated", c.Updated, "deleted", c.Deleted)
				return
			}
			// A failed write leaves the clientset partly updated; the
			// next poll diffs against what it holds and tries again.
			stamp = ""
		}
	}
	if stamp != "" && stamp == s.failed {
		return
	}
	s.failed = stamp
	logger.Error(err, "Reading the snapshot failed; serving the objects last read until the files change")
}

// fingerprint returns a string that changes when a file of the snapshot is
// added, removed, resized or modified.
func fingerprint(path string) (string, error) {
	files, err := list(path)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\n", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

// list returns the snapshot's files: path itself, or the *.yaml, *.yml and
// *.json files of the directory path, sorted, hidden ones skipped.
func list(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") { // editors' swap and backup files
			continue
		}
		if t := e.Type(); !t.IsRegular() && t&fs.ModeSymlink == 0 {
			continue
		}
		switch filepath.Ext(name) {
		case ".yaml", ".yml", ".json":
			files = append(files, filepath.Join(path, name))
		}
	}
	return files, nil // ReadDir sorts by name
}

// read decodes every file of the snapshot. Its error joins every problem
// of every file.
func read(path string) (map[key]object, error) {
	files, err := list(path)
	if err != nil {
		return nil, err
	}
	out := map[key]object{}
	var errs []error
	for _, f := range files {
		objs, err := decodeFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var all []runtime.Object
		for _, o := range objs.Nodes {
			all = append(all, o)
		}
		for _, o := range objs.Services {
			all = append(all, o)
		}
		for _, o := range objs.EndpointSlices {
			all = append(all, o)
		}
		for _, o := range all {
			k := keyOf(o)
			if first, dup := out[k]; dup {
				// Within one file, objects.Decode has refused it already.
				errs = append(errs, fmt.Errorf("%s: %v: also defined in %s", f, k, first.file))
				continue
			}
			clean(o)
			out[k] = object{obj: o, file: f}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func decodeFile(name string) (*objects.Objects, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return objects.Decode(f, name)
}

func keyOf(o runtime.Object) key {
	switch o := o.(type) {
	case *v1.Node:
		return key{"Node", "", o.Name}
	case *v1.Service:
		return key{"Service", o.Namespace, o.Name}
	case *discoveryv1.EndpointSlice:
		return key{"EndpointSlice", o.Namespace, o.Name}
	}
	panic(fmt.Sprintf("snapshot: unexpected type %T", o))
}

// clean drops the metadata an apiserver owns, which `kubectl get -o yaml`
// prints: the clientset assigns its own resource versions.
func clean(o runtime.Object) {
	m, ok := o.(metav1.Object)
	if !ok {
		return
	}
	m.SetResourceVersion("")
	m.SetManagedFields(nil)
}

// apply makes the clientset hold want: creates and updates in kind order
// (Nodes, Services, EndpointSlices), then deletes in the reverse order.
// Unchanged objects are not written, so the informers see no event for
// them.
func (s *Source) apply(ctx context.Context, want map[key]object) (Changes, error) {
	// The fake clientset records a deep copy of every action it serves,
	// for tests to inspect, and never forgets them: 40 MB after the first
	// read of 10k Services, and as much again after every change.
	defer s.client.ClearActions()
	var c Changes
	keys := slices.SortedFunc(maps.Keys(want), compareKeys)
	for _, k := range keys {
		w := want[k]
		sum := digest(w.obj)
		have, exists := s.objects[k]
		if exists && have.sum == sum && sum != ([sha256.Size]byte{}) {
			s.objects[k] = applied{sum, w.file} // the file may have changed
			continue
		}
		if err := s.throttle(ctx); err != nil {
			return c, err
		}
		if err := s.write(ctx, w.obj, exists); err != nil {
			return c, fmt.Errorf("%s: %v: %w", w.file, k, err)
		}
		s.objects[k] = applied{sum, w.file}
		if exists {
			c.Updated++
		} else {
			c.Created++
		}
	}
	var gone []key
	for k := range s.objects {
		if _, ok := want[k]; !ok {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, func(a, b key) int { return compareKeys(b, a) })
	for _, k := range gone {
		if err := s.throttle(ctx); err != nil {
			return c, err
		}
		if err := s.delete(ctx, k); err != nil {
			return c, fmt.Errorf("%v (was in %s): %w", k, s.objects[k].file, err)
		}
		delete(s.objects, k)
		c.Deleted++
	}
	return c, nil
}

// write creates or updates o through the clientset.
func (s *Source) write(ctx context.Context, o runtime.Object, update bool) error {
	var err error
	switch o := o.(type) {
	case *v1.Node:
		c := s.client.CoreV1().Nodes()
		if update {
			_, err = c.Update(ctx, o, metav1.UpdateOptions{})
		} else {
			_, err = c.Create(ctx, o, metav1.CreateOptions{})
		}
	case *v1.Service:
		c := s.client.CoreV1().Services(o.Namespace)
		if update {
			_, err = c.Update(ctx, o, metav1.UpdateOptions{})
		} else {
			_, err = c.Create(ctx, o, metav1.CreateOptions{})
		}
	case *discoveryv1.EndpointSlice:
		c := s.client.DiscoveryV1().EndpointSlices(o.Namespace)
		if update {
			_, err = c.Update(ctx, o, metav1.UpdateOptions{})
		} else {
			_, err = c.Create(ctx, o, metav1.CreateOptions{})
		}
	default:
		err = fmt.Errorf("unexpected type %T", o)
	}
	return err
}

// delete deletes the object k through the clientset.
func (s *Source) delete(ctx context.Context, k key) error {
	switch k.kind {
	case "Node":
		return s.client.CoreV1().Nodes().Delete(ctx, k.name, metav1.DeleteOptions{})
	case "Service":
		return s.client.CoreV1().Services(k.namespace).Delete(ctx, k.name, metav1.DeleteOptions{})
	case "EndpointSlice":
		return s.client.DiscoveryV1().EndpointSlices(k.namespace).Delete(ctx, k.name, metav1.DeleteOptions{})
	}
	return fmt.Errorf("unexpected kind %q", k.kind)
}

// watch serves a watch as the fake clientset's default reactor does, and
// remembers the watcher so that throttle can see how full it is.
func (s *Source) watch(action k8stesting.Action) (bool, watch.Interface, error) {
	var opts metav1.ListOptions
	if wa, ok := action.(k8stesting.WatchActionImpl); ok {
		opts = wa.ListOptions
	}
	w, err := s.client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
	if err != nil {
		return false, nil, err
	}
	if rf, ok := w.(*watch.RaceFreeFakeWatcher); ok {
		s.mu.Lock()
		s.watchers = append(s.watchers, rf)
		s.mu.Unlock()
	}
	return true, w, nil
}

// throttle waits until no live watcher holds highWater undelivered
// events, so that the write that follows cannot fill one: the fake
// watcher panics when its buffer is full, where an apiserver would make
// the client catch up. Stopped watchers (their informer stopped) are
// dropped.
func (s *Source) throttle(ctx context.Context) error {
	for {
		busy := false
		s.mu.Lock()
		live := s.watchers[:0]
		for _, w := range s.watchers {
			if w.IsStopped() {
				continue
			}
			live = append(live, w)
			if len(w.ResultChan()) >= highWater {
				busy = true
			}
		}
		clear(s.watchers[len(live):])
		s.watchers = live
		s.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}
