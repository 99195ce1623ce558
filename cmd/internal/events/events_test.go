package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// testWait bounds every wait of these tests.
const testWait = 20 * time.Second

// records is a slog handler that hands every record's message and
// attributes, as text, to a channel.
type records chan string

func (c records) Enabled(context.Context, slog.Level) bool { return true }
func (c records) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	select {
	case c <- b.String():
	default: // a full channel drops: tests wait for lines they expect soon
	}
	return nil
}
func (c records) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c records) WithGroup(string) slog.Handler      { return c }

// waitRecord waits for a record containing every part.
func waitRecord(t *testing.T, recs records, parts ...string) {
	t.Helper()
	timeout := time.After(testWait)
	var seen []string
	for {
		select {
		case r := <-recs:
			seen = append(seen, r)
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(r, p)
			}
			if ok {
				return
			}
		case <-timeout:
			t.Fatalf("no log record with %q; saw:\n%s", parts, strings.Join(seen, "\n"))
		}
	}
}

// eventsClock is a fake clock that says on waits each time the recorder
// starts waiting (After), once the wait is registered, so that a test
// steps the clock exactly past it.
type eventsClock struct {
	*testingclock.FakeClock
	waits chan time.Duration
}

func (c eventsClock) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	c.waits <- d
	return ch
}

// eventsCall is one request the fake API server answered.
type eventsCall struct {
	verb  string
	name  string
	patch map[string]any
	event *corev1.Event // the Event as stored after the call; nil on error
	err   error
}

// eventsAPI is a fake clientset whose Event requests are reported on calls
// after the object tracker has answered them, and fail with the errors
// queued in fail (by verb) first.
type eventsAPI struct {
	kube  *kubefake.Clientset
	calls chan eventsCall

	mu   sync.Mutex
	fail map[string][]error
}

func eventsNewAPI() *eventsAPI {
	api := &eventsAPI{kube: kubefake.NewClientset(), calls: make(chan eventsCall, 100), fail: map[string][]error{}}
	api.kube.PrependReactor("*", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		c := eventsCall{verb: a.GetVerb()}
		if c.verb != "create" && c.verb != "patch" {
			return false, nil, nil // the tracker's (the test's List)
		}
		switch a := a.(type) {
		case k8stesting.CreateAction:
			c.name = a.GetObject().(*corev1.Event).Name
		case k8stesting.PatchAction:
			c.name = a.GetName()
			if a.GetPatchType() != types.MergePatchType {
				c.err = fmt.Errorf("patch type %s, want %s", a.GetPatchType(), types.MergePatchType)
			}
			_ = json.Unmarshal(a.GetPatch(), &c.patch)
		}
		api.mu.Lock()
		if errs := api.fail[c.verb]; len(errs) > 0 && c.err == nil {
			c.err, api.fail[c.verb] = errs[0], errs[1:]
		}
		api.mu.Unlock()
		var obj runtime.Object
		if c.err == nil {
			_, obj, c.err = k8stesting.ObjectReaction(api.kube.Tracker())(a)
		}
		if c.err == nil {
			c.event = obj.(*corev1.Event)
		}
		api.calls <- c
		return true, obj, c.err
	})
	return api
}

func (api *eventsAPI) failNext(verb string, errs ...error) {
	api.mu.Lock()
	defer api.mu.Unlock()
	api.fail[verb] = append(api.fail[verb], errs...)
}

// next waits for the next request.
func (api *eventsAPI) next(t *testing.T) eventsCall {
	t.Helper()
	select {
	case c := <-api.calls:
		return c
	case <-time.After(testWait):
		t.Fatal("no Event request")
		return eventsCall{}
	}
}

// nextOK waits for the next request and checks its verb, its success and
// the stored Event's reason, message and count.
func (api *eventsAPI) nextOK(t *testing.T, verb, reason, message string, count int32) eventsCall {
	t.Helper()
	c := api.next(t)
	if c.verb != verb || c.err != nil || c.event.Reason != reason || c.event.Message != message || c.event.Count != count {
		got := "no Event"
		if c.event != nil {
			got = fmt.Sprintf("reason %q, message %q, count %d", c.event.Reason, c.event.Message, c.event.Count)
		}
		t.Fatalf("request %s %s (err %v): %s; want %s of reason %q, message %q, count %d",
			c.verb, c.name, c.err, got, verb, reason, message, count)
	}
	return c
}

// eventsSetup returns a recorder over a fake clock, with a queue of queue
// Events, not started; its API server; and its log records.
func eventsSetup(t *testing.T, queue int) (*Recorder, eventsClock, *eventsAPI, records) {
	clk := eventsClock{FakeClock: testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), waits: make(chan time.Duration, 10)}
	recs := make(records, 1000)
	r := newWith("n", func() types.UID { return "uid-1" }, slog.New(recs), clk, queue)
	return r, clk, eventsNewAPI(), recs
}

func eventsStart(t *testing.T, r *Recorder, api *eventsAPI) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.Start(ctx, clientOf{api.kube})
}

// TestEventsDedupe: a repeated Event is a merge patch of the first (count
// 2, a later lastTimestamp), about the Node, in the default namespace.
func TestEventsDedupe(t *testing.T) {
	r, clk, api, _ := eventsSetup(t, eventQueueSize)
	eventsStart(t, r, api)

	r.Warn("RulesFileMissing", "lost")
	first := api.nextOK(t, "create", "RulesFileMissing", "lost", 1).event
	if first.Namespace != metav1.NamespaceDefault || first.InvolvedObject.Kind != "Node" || first.InvolvedObject.APIVersion != "v1" ||
		first.InvolvedObject.Name != "n" || first.InvolvedObject.UID != "uid-1" || first.Type != corev1.EventTypeWarning ||
		first.Source != (corev1.EventSource{Component: "featureplug", Host: "n"}) || !strings.HasPrefix(first.Name, "n.") {
		t.Errorf("Event %+v: want a Warning in default from featureplug on n about Node n uid-1, named n.<hex>", first)
	}
	clk.Step(time.Minute)
	r.Warn("RulesFileMissing", "lost")
	c := api.nextOK(t, "patch", "RulesFileMissing", "lost", 2)
	if c.name != first.Name || c.patch["count"] != float64(2) {
		t.Errorf("patch of %s %v, want of %s with count 2", c.name, c.patch, first.Name)
	}
	if !c.event.LastTimestamp.After(first.LastTimestamp.Time) || !c.event.FirstTimestamp.Equal(&first.FirstTimestamp) {
		t.Errorf("timestamps first %v last %v after the repeat, want first %v and a later last", c.event.FirstTimestamp, c.event.LastTimestamp, first.FirstTimestamp)
	}
	list, err := api.kube.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Errorf("Events listed: %v, %v; want 1", list, err)
	}
}

// TestEventsAggregateSimilar: from the 10th different message of one reason
// within 10 minutes, the messages go into one combined Event, a count like
// any other; a message seen before keeps its own Event; after 10 minutes
// without that reason, a message is an Event of its own again.
func TestEventsAggregateSimilar(t *testing.T) {
	r, clk, api, _ := eventsSetup(t, eventQueueSize)
	eventsStart(t, r, api)

	for i := 1; i <= 11; i++ {
		r.Warn("RulesRejected", fmt.Sprintf("error %d", i))
		clk.Step(time.Second)
	}
	for i := 1; i <= 9; i++ {
		api.nextOK(t, "create", "RulesRejected", fmt.Sprintf("error %d", i), 1)
	}
	combined := api.nextOK(t, "create", "RulesRejected", "(combined from similar events): error 10", 1)
	c := api.nextOK(t, "patch", "RulesRejected", "(combined from similar events): error 11", 2)
	if c.name != combined.name {
		t.Errorf("patched %s, want the combined Event %s", c.name, combined.name)
	}

	r.Warn("RulesRejected", "error 1")
	api.nextOK(t, "patch", "RulesRejected", "error 1", 2)
	r.Warn("RulesRejected", "error 12")
	api.nextOK(t, "patch", "RulesRejected", "(combined from similar events): error 12", 3)

	clk.Step(eventAggregateWindow + time.Second)
	r.Warn("RulesRejected", "error 13")
	api.nextOK(t, "create", "RulesRejected", "error 13", 1)
}

// TestEventsRateLimit: 25 Events of one object and type pass, the 26th
// is dropped; after 4 minutes none passes yet, after 5 one does. A
// Normal Event has a bucket of its own.
func TestEventsRateLimit(t *testing.T) {
	r, clk, api, _ := eventsSetup(t, eventQueueSize)
	eventsStart(t, r, api)

	for i := 1; i <= 26; i++ {
		r.Warn(fmt.Sprintf("R%02d", i), "m")
	}
	r.Normal("N1", "m")
	for i := 1; i <= 25; i++ {
		api.nextOK(t, "create", fmt.Sprintf("R%02d", i), "m", 1)
	}
	api.nextOK(t, "create", "N1", "m", 1) // not R26

	clk.Step(4 * time.Minute)
	r.Warn("R27", "m")
	clk.Step(time.Minute)
	r.Warn("R28", "m")
	api.nextOK(t, "create", "R28", "m", 1) // not R27
}

// TestEventsQueueFull: with the queue full, recording returns at once,
// drops the Event and says so in the log; what was queued is sent once
// started.
func TestEventsQueueFull(t *testing.T) {
	r, _, api, records := eventsSetup(t, 2)
	r.Warn("Q1", "m")
	r.Warn("Q2", "m")
	r.Warn("Q3", "m") // a blocking send would hang here
	waitRecord(t, records, "Event queue full", "dropped=1", "reason=Q3")

	eventsStart(t, r, api)
	api.nextOK(t, "create", "Q1", "m", 1)
	api.nextOK(t, "create", "Q2", "m", 1)
	r.Warn("Q4", "m")
	api.nextOK(t, "create", "Q4", "m", 1) // not Q3
}

// TestEventsRecordedBeforeStart: an Event recorded before the API client
// is up (a rules error at start) is sent once the recorder starts.
func TestEventsRecordedBeforeStart(t *testing.T) {
	r, _, api, _ := eventsSetup(t, eventQueueSize)
	r.Warn("RulesInvalid", "before start")
	select {
	case c := <-api.calls:
		t.Fatalf("request %s before start", c.verb)
	default:
	}
	eventsStart(t, r, api)
	api.nextOK(t, "create", "RulesInvalid", "before start", 1)
}

// TestEventsRetry: a 500 is retried after a jittered delay; a 400 is not
// retried; five failures in a row give up, with a log line.
func TestEventsRetry(t *testing.T) {
	r, clk, api, records := eventsSetup(t, eventQueueSize)
	eventsStart(t, r, api)

	api.failNext("create", apierrors.NewInternalError(fmt.Errorf("etcd down")))
	r.Warn("R1", "m")
	if c := api.next(t); !apierrors.IsInternalError(c.err) {
		t.Fatalf("first request: %s %v, want the injected 500", c.verb, c.err)
	}
	d := <-clk.waits
	if d < eventRetryDelay || d > eventRetryDelay*3/2 {
		t.Errorf("retry after %v, want %v jittered by up to half", d, eventRetryDelay)
	}
	clk.Step(d)
	api.nextOK(t, "create", "R1", "m", 1)

	api.failNext("create", apierrors.NewBadRequest("malformed"))
	r.Warn("R2", "m")
	if c := api.next(t); !apierrors.IsBadRequest(c.err) {
		t.Fatalf("request: %s %v, want the injected 400", c.verb, c.err)
	}
	waitRecord(t, records, "Event not written", "reason=R2", "tries=1")
	r.Warn("R3", "m")
	api.nextOK(t, "create", "R3", "m", 1) // R2 not retried

	unavailable := apierrors.NewServiceUnavailable("overloaded")
	api.failNext("create", unavailable, unavailable, unavailable, unavailable, unavailable)
	r.Warn("R4", "m")
	for try := 1; try <= eventWriteTries; try++ {
		if c := api.next(t); !apierrors.IsServiceUnavailable(c.err) {
			t.Fatalf("try %d: %s %v, want the injected 503", try, c.verb, c.err)
		}
		if try < eventWriteTries {
			clk.Step(<-clk.waits)
		}
	}
	waitRecord(t, records, "Event not written", "reason=R4", fmt.Sprintf("tries=%d", eventWriteTries))
}

// TestEventsPatchNotFound: a repeat of an Event the API server no longer
// has (its TTL passed) creates it again, with the count so far.
func TestEventsPatchNotFound(t *testing.T) {
	r, clk, api, _ := eventsSetup(t, eventQueueSize)
	eventsStart(t, r, api)

	r.Warn("R", "m")
	first := api.nextOK(t, "create", "R", "m", 1)
	if err := api.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("events"), metav1.NamespaceDefault, first.name); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Hour)
	r.Warn("R", "m")
	if c := api.next(t); c.verb != "patch" || !apierrors.IsNotFound(c.err) {
		t.Fatalf("request %s %v, want a patch answered NotFound", c.verb, c.err)
	}
	c := api.nextOK(t, "create", "R", "m", 2)
	if c.name != first.name {
		t.Errorf("created again as %s, want %s", c.name, first.name)
	}
}

// TestEventCut: long messages are cut to 1024 bytes at a character
// boundary, ending with "...".
func TestEventCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // length of the result
	}{
		{strings.Repeat("a", 1024), 1024},
		{strings.Repeat("a", 1025), 1024},
		{strings.Repeat("a", 1020) + "éééé", 1023}, // é is 2 bytes: cut before the one across 1021
	} {
		got := eventCut(tc.in)
		if len(got) != tc.want || (len(tc.in) > 1024 && !strings.HasSuffix(got, "...")) || !strings.HasPrefix(tc.in, strings.TrimSuffix(got, "...")) {
			t.Errorf("eventCut(%d bytes) = %d bytes ending %q, want %d bytes", len(tc.in), len(got), got[len(got)-5:], tc.want)
		}
	}
}

// TestEventName: names are "<node>.<hex>", unique while the clock stands
// still, and valid for a node name near the length limit.
func TestEventName(t *testing.T) {
	now := time.Unix(0, 0x10)
	r := newWith("n", nil, nil, testingclock.NewFakeClock(now), 1)
	if a, b := r.name(now), r.name(now); a != "n.10" || b != "n.11" {
		t.Errorf("names %q, %q; want n.10, n.11", a, b)
	}
	long := newWith(strings.Repeat("a", 252), nil, nil, testingclock.NewFakeClock(now), 1) // + ".10": 255 > 253
	if got := long.name(now); got != "featureplug.10" {
		t.Errorf("name for a 252-character node %q, want featureplug.10", got)
	}
}

// clientOf is the Client of a fake clientset.
type clientOf struct{ cs *kubefake.Clientset }

func (c clientOf) Events(namespace string) Events { return c.cs.CoreV1().Events(namespace) }
