package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// sent waits until the Event with message marker has been created, then
// returns every Event sent so far. Events are sent in order, so every one
// sent before the marker's is there too.
func sent(t *testing.T, client *fake.Clientset, marker string) []v1.Event {
	t.Helper()
	var events []v1.Event
	poll := func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		events = list.Items
		for _, e := range events {
			if strings.Contains(e.Message, marker) {
				return true, nil
			}
		}
		return false, nil
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true, poll); err != nil {
		t.Fatalf("waiting for the Event %q: %v", marker, err)
	}
	return events
}

// TestEvents: failures and fallbacks of many ports make one Event per
// reason, module and failure reason per interval, about the Node, with
// the module in its annotations; a rejected configuration makes one.
func TestEvents(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	r := newRecorder(client, "node-a", clk, 5*time.Minute)
	defer r.Close()
	obs := r.Pipeline()

	mod, stage := "file:///m.wasm", abi.StageTopology
	trap := &runtime.CallError{Module: mod, Stage: stage, Reason: runtime.ReasonTrap, Err: errors.New("unreachable")}
	timeout := &runtime.CallError{Module: mod, Stage: stage, Reason: runtime.ReasonTimeout, Err: errors.New("deadline")}
	stoppedErr := &runtime.CallError{Module: mod, Stage: stage, Reason: runtime.ReasonInstantiate, Err: context.Canceled}
	for i := range 100 {
		obs.Call(mod, stage, 1, time.Millisecond, trap)
		obs.PortFailed(mod, stage, fmt.Sprintf("ns/svc-%d:http/TCP/IPv4", i), pipeline.SourceBuiltin, trap)
	}
	obs.Call(mod, stage, 1, time.Millisecond, nil)
	obs.Call(mod, stage, 1, time.Millisecond, stoppedErr)
	obs.PortFailed(mod, stage, "ns/svc-0:http/TCP/IPv4", pipeline.SourceLastGood, stoppedErr)
	obs.PortFailed(mod, stage, "ns/svc-0:http/TCP/IPv4", pipeline.SourceLastGood, timeout)
	otherTimeout := &runtime.CallError{Module: "other.wasm", Stage: stage, Reason: runtime.ReasonTimeout, Err: errors.New("deadline")}
	obs.PortFailed("other.wasm", stage, "ns/svc-0:http/TCP/IPv4", pipeline.SourceLastGood, otherTimeout)
	r.ConfigRejected(errors.New("modules[0].source: marker-1"))

	type seen struct {
		reason, module, failure, message string
		count                            int32
	}
	check := func(events []v1.Event, want []seen) {
		t.Helper()
		var got []seen
		for _, e := range events {
			if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "node-a" || e.Type != v1.EventTypeWarning || e.Source.Component != "wasp" {
				t.Errorf("Event %s: about %s %s, type %s, from %+v; want a Warning about Node node-a from wasp",
					e.Name, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Source)
			}
			got = append(got, seen{e.Reason, e.Annotations[AnnotationModule], e.Annotations[AnnotationFailureReason], e.Message, e.Count})
		}
		if len(got) != len(want) {
			t.Fatalf("Events:\n%q\nwant %d", got, len(want))
		}
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g.reason == w.reason && g.module == w.module && g.failure == w.failure &&
					strings.Contains(g.message, w.message) && g.count == w.count
			}
			if !found {
				t.Errorf("no Event %+v among\n%q", w, got)
			}
		}
	}
	callFailed := seen{ReasonModuleCallFailed, mod, "trap", `module "file:///m.wasm" stage topology: trap: unreachable`, 1}
	rest := []seen{
		{ReasonServicePortFallback, mod, "trap", "service port ns/svc-0:http/TCP/IPv4 fell back to the builtin semantics", 1},
		{ReasonServicePortFallback, mod, "timeout", "fell back to its last good decision", 1},
		{ReasonServicePortFallback, "other.wasm", "timeout", `module "other.wasm" stage topology: timeout`, 1},
		{ReasonConfigRejected, "", "", "marker-1", 1},
	}
	check(sent(t, client, "marker-1"), append([]seen{callFailed}, rest...))

	// Within the interval: nothing new. After it: the same failure is
	// reported again, once; the correlator counts it on the same Event.
	clk.Step(4 * time.Minute)
	obs.Call(mod, stage, 1, time.Millisecond, trap)
	clk.Step(time.Minute)
	for range 10 {
		obs.Call(mod, stage, 1, time.Millisecond, trap)
	}
	r.ConfigRejected(errors.New("marker-2"))
	callFailed.count = 2
	check(sent(t, client, "marker-2"), append([]seen{callFailed, {ReasonConfigRejected, "", "", "marker-2", 1}}, rest...))
}

func TestSendConfigRejected(t *testing.T) {
	client := fake.NewClientset()
	err := SendConfigRejected(context.Background(), client, "node-a", errors.New("nftables.masqueradeBit: Invalid value: 40: must be in [0,31]"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d Events; want 1", len(list.Items))
	}
	e := list.Items[0]
	if e.Reason != ReasonConfigRejected || e.Type != v1.EventTypeWarning || e.InvolvedObject.Kind != "Node" ||
		e.InvolvedObject.Name != "node-a" || !strings.Contains(e.Message, "nftables.masqueradeBit") {
		t.Errorf("Event %+v; want a Warning ConfigRejected about Node node-a naming the field", e)
	}
}

// TestEventEscapesModuleText: a module's stderr and error text reach an
// Event with their terminal escapes escaped, and a long message is cut
// on a character boundary.
func TestEventEscapesModuleText(t *testing.T) {
	client := fake.NewClientset()
	r := newRecorder(client, "node-a", clocktesting.NewFakeClock(time.Now()), time.Minute)
	defer r.Close()
	mod, stage := "file:///m.wasm", abi.StageTopology
	err := &runtime.CallError{Module: mod, Stage: stage, Reason: runtime.ReasonModuleError,
		Err: errors.New("declined \x1b]0;owned\a\u202e"), Stderr: "panic: \x1b[2J\x1b[Hmarker-esc"}
	r.ModuleCallFailed(mod, stage, err)
	r.ConfigRejected(errors.New("marker-long " + strings.Repeat("é", maxMessage)))
	events := sent(t, client, "marker-long")
	var msgs []string
	for _, e := range events {
		msgs = append(msgs, e.Message)
		if strings.ContainsAny(e.Message, "\x1b\a\u202e") || !utf8.ValidString(e.Message) || len(e.Message) > maxMessage {
			t.Errorf("Event message %q holds control characters, is not UTF-8 or is longer than %d", e.Message, maxMessage)
		}
	}
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{`declined \x1b]0;owned\a\u202e`, `(stderr: panic: \x1b[2J\x1b[Hmarker-esc)`} {
		if !strings.Contains(joined, want) {
			t.Errorf("no Event message holds %q:\n%s", want, joined)
		}
	}
}
