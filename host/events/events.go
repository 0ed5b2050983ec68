// Package events reports, as Kubernetes Events on the local Node, what an
// operator must see without reading wasp's logs or metrics: a module call
// that failed, a service port that fell back to its last good decision or
// to the builtin semantics, and a configuration that was rejected.
//
// Events are rate limited: at most one per Event reason, module and
// failure reason per interval (DefaultInterval), whatever the number of
// calls or service ports that failed meanwhile; the metrics
// (wasp_module_call_failures_total, wasp_module_service_port_failures_total)
// count them all. The limit is applied before an Event is built, and
// again by client-go's event correlator (tools/record), whose spam filter
// is keyed the same way and which also aggregates similar Events.
package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/printable"
)

// Event reasons.
const (
	// ReasonModuleCallFailed: a call into a stage's module failed as a
	// whole (trap, timeout, memory cap, malformed output, ...).
	ReasonModuleCallFailed = "ModuleCallFailed"
	// ReasonServicePortFallback: a stage's module failed for a service
	// port, which kept its last good decision or got the builtin
	// semantics.
	ReasonServicePortFallback = "ServicePortFallback"
	// ReasonConfigRejected: a configuration failed validation and
	// nothing of it was applied.
	ReasonConfigRejected = "ConfigRejected"
	// ReasonModuleLoadFailed: a new module chain (a changed module file,
	// the ServiceProxyModules chosen for the node) did not load; the
	// running modules, or the failure policy's fallback, serve.
	ReasonModuleLoadFailed = "ModuleLoadFailed"
)

// Annotations of the Events, naming what they are about.
const (
	AnnotationModule        = "wasp.dev/module"
	AnnotationStage         = "wasp.dev/stage"
	AnnotationFailureReason = "wasp.dev/failure-reason"
)

const (
	// DefaultInterval is the least time between two Events of the same
	// reason, module and failure reason.
	DefaultInterval = 5 * time.Minute

	// component is the Events' source and reporting controller.
	component = "wasp"

	// maxMessage bounds an Event's message, as the events.k8s.io API
	// does (1 kB).
	maxMessage = 1024

	// spamCacheSize bounds the keys the correlator's spam filter keeps.
	spamCacheSize = 4096
)

// Recorder sends the Events. Its methods are safe for concurrent use,
// quick, and never block on the apiserver.
type Recorder struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	node        *v1.ObjectReference
	clock       clock.PassiveClock
	interval    time.Duration

	mu   sync.Mutex
	last map[key]time.Time // when each key last sent an Event
}

// key is what one Event per interval is allowed for.
type key struct {
	reason, module, failure string
}

// New returns a Recorder that sends Events about node nodeName through
// client, and starts sending. Close stops it.
func New(client kubernetes.Interface, nodeName string) *Recorder {
	return newRecorder(client, nodeName, clock.RealClock{}, DefaultInterval)
}

func newRecorder(client kubernetes.Interface, nodeName string, c clock.PassiveClock, interval time.Duration) *Recorder {
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		LRUCacheSize: spamCacheSize,
		BurstSize:    1,
		QPS:          float32(1 / interval.Seconds()),
		SpamKeyFunc:  spamKey,
		Clock:        c,
	}))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &Recorder{
		broadcaster: b,
		recorder:    b.NewRecorder(scheme.Scheme, v1.EventSource{Component: component, Host: nodeName}),
		// As kube-proxy: the Node's UID is its name.
		node:     &v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
		clock:    c,
		interval: interval,
		last:     map[key]time.Time{},
	}
}

// spamKey keys the correlator's spam filter like Recorder's own limit.
func spamKey(e *v1.Event) string {
	return e.Source.Host + "/" + e.Reason + "/" + e.Annotations[AnnotationModule] + "/" + e.Annotations[AnnotationFailureReason]
}

// Close stops sending Events; those not sent yet are dropped.
func (r *Recorder) Close() { r.broadcaster.Shutdown() }

// allow reports whether an Event of k may be sent now, and if so counts
// it as sent.
func (r *Recorder) allow(k key) bool {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.last[k]; ok && now.Sub(last) < r.interval {
		return false
	}
	r.last[k] = now
	return true
}

// send sends a Warning Event about the Node if k allows it.
func (r *Recorder) send(k key, stage string, format string, args ...any) {
	if !r.allow(k) {
		return
	}
	msg := message(fmt.Sprintf(format, args...))
	annotations := map[string]string{}
	for name, v := range map[string]string{AnnotationModule: k.module, AnnotationStage: stage, AnnotationFailureReason: k.failure} {
		if v != "" {
			annotations[name] = v
		}
	}
	r.recorder.AnnotatedEventf(r.node, annotations, v1.EventTypeWarning, k.reason, "%s", msg)
}

// ModuleCallFailed reports a call into module, for stage, that failed as
// a whole with err.
func (r *Recorder) ModuleCallFailed(module string, stage abi.Stage, err error) {
	reason := failureReason(err)
	r.send(key{ReasonModuleCallFailed, module, reason}, stage.String(),
		"%v (reported at most every %v for this module and reason; wasp_module_call_failures_total counts every one)", err, r.interval)
}

// ServicePortFallback reports a service port (its key) that module, for
// stage, failed for with err, and the fallback it got.
func (r *Recorder) ServicePortFallback(module string, stage abi.Stage, port string, src pipeline.Source, err error) {
	to := "its last good decision"
	if src == pipeline.SourceBuiltin {
		to = "the builtin semantics"
	}
	reason := failureReason(err)
	r.send(key{ReasonServicePortFallback, module, reason}, stage.String(),
		"service port %s fell back to %s: %v (reported at most every %v for this module and reason; wasp_module_service_port_failures_total counts every one, wasp_fallback_service_ports those served so)",
		port, to, err, r.interval)
}

// ConfigRejected reports a configuration that failed validation with err.
func (r *Recorder) ConfigRejected(err error) {
	r.send(key{reason: ReasonConfigRejected}, "", "configuration rejected, nothing of it applied: %v", err)
}

// ModuleLoadFailed reports a module chain that did not load with err.
func (r *Recorder) ModuleLoadFailed(err error) {
	r.send(key{reason: ReasonModuleLoadFailed}, "", "a new module chain did not load, the running modules (or the failure policy's fallback) serve: %v", err)
}

// SendConfigRejected sends the ConfigRejected Event at once, not through a
// Recorder: for a process that refuses its configuration and exits, which
// a Recorder's asynchronous sending would not outlive. It is the one Event
// an operator sees for a DaemonSet pod that crash-loops on a bad ConfigMap.
func SendConfigRejected(ctx context.Context, client kubernetes.Interface, nodeName string, err error) error {
	msg := message(fmt.Sprintf("configuration rejected, nothing of it applied: %v", err))
	now := metav1.NewTime(time.Now())
	ev := &v1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: nodeName + ".", Namespace: metav1.NamespaceDefault},
		// As kube-proxy: the Node's UID is its name.
		InvolvedObject:      v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
		Reason:              ReasonConfigRejected,
		Message:             msg,
		Type:                v1.EventTypeWarning,
		Source:              v1.EventSource{Component: component, Host: nodeName},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: component,
		ReportingInstance:   component + "-" + nodeName,
	}
	_, err = client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// message is an Event's message of s: module text in it (stderr, error
// records, rejections) escaped, at most maxMessage bytes.
func message(s string) string {
	s = printable.String(s)
	if len(s) > maxMessage {
		s = strings.ToValidUTF8(s[:maxMessage-3], "") + "..."
	}
	return s
}

// failureReason returns the runtime.Reason of a module failure, "other"
// if it is none.
func failureReason(err error) string {
	if r := runtime.ReasonOf(err); r != "" {
		return string(r)
	}
	return "other"
}

// Pipeline returns the hook of pipeline.Options.Observer (combine it with
// the metrics' through pipeline.Observers).
func (r *Recorder) Pipeline() pipeline.Observer { return pipelineHook{r} }

type pipelineHook struct{ r *Recorder }

var _ pipeline.Observer = pipelineHook{}

// Calls stopped with their sync (wasp is stopping) are no module failure
// and send no Event.

func (h pipelineHook) Call(module string, stage abi.Stage, _ int, _ time.Duration, err error) {
	if err != nil && !stopped(err) {
		h.r.ModuleCallFailed(module, stage, err)
	}
}

func (h pipelineHook) PortFailed(module string, stage abi.Stage, key string, src pipeline.Source, err error) {
	if !stopped(err) {
		h.r.ServicePortFallback(module, stage, key, src, err)
	}
}

// stopped reports whether err is that of a call cancelled with its sync.
// A timeout is a module failure, whatever it wraps.
func stopped(err error) bool {
	return errors.Is(err, context.Canceled)
}

func (pipelineHook) Fallbacks(*pipeline.Fallbacks) {}
