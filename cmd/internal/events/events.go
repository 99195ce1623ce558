// Package events records featureplug's Kubernetes Events on its Node,
// where `kubectl describe node` shows them, with the core recorder's
// semantics (dedupe, aggregation, rate limits) and a queue that never
// blocks the caller.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
)

// Limits of the Event recorder. Those of the core recorder
// (client-go's tools/record) unless said otherwise.
const (
	// eventQueueSize bounds the Events waiting to be written; one more is
	// dropped (and logged) rather than block the caller.
	eventQueueSize = 1000
	// eventCacheSize bounds each cache (dedupe, aggregation, rate limits).
	eventCacheSize = 4096
	// eventAggregateWindow and eventAggregateMax: from the
	// eventAggregateMax-th different message of one reason within
	// eventAggregateWindow of the previous one, the messages go into one
	// combined Event.
	eventAggregateWindow = 10 * time.Minute
	eventAggregateMax    = 10
	// eventSpamBurst and eventSpamQPS: a token bucket per object and type.
	eventSpamBurst = 25
	eventSpamQPS   = 1.0 / 300
	// eventMaxMessage cuts longer messages (the API server's limit is
	// larger; a Node's description stays readable).
	eventMaxMessage = 1024
	// eventWriteTries, eventRetryDelay: a failed write is tried again
	// after eventRetryDelay, doubled each time and lengthened by up to
	// half, eventWriteTries times in all: at most 22.5 s of waiting, where
	// the core recorder waits up to 11 x 10 s and so holds every later
	// Event up for two minutes.
	eventWriteTries  = 5
	eventRetryDelay  = time.Second
	eventRetryJitter = 0.5
	// eventWriteTimeout bounds one request.
	eventWriteTimeout = 10 * time.Second
	// eventDropLogEvery rate-limits the log line about a full queue.
	eventDropLogEvery = time.Minute
	// eventComponent is the Events' source component.
	eventComponent = "featureplug"
	// eventCombinedPrefix starts an aggregated Event's message.
	eventCombinedPrefix = "(combined from similar events): "
)

// Events is the part of client-go's typed EventInterface (core/v1) the
// recorder uses; that interface and the agent's API client satisfy it.
type Events interface {
	Create(ctx context.Context, event *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Event, error)
}

// Client gives the Events of a namespace (the agent's API client).
type Client interface {
	Events(namespace string) Events
}

// Recorder reports problems and changes as Kubernetes Events on the
// agent's Node, where `kubectl describe node` shows them. It keeps the
// core recorder's semantics (client-go's tools/record), which operators
// know from the kubelet's Events:
//   - an Event identical to an earlier one (same object, type, reason and
//     message) is a PATCH of that Event (count+1, lastTimestamp), not a new
//     object; when the Event is gone (the API server's TTL) it is created
//     again;
//   - from the 10th different message with the same object, type and reason
//     within 10 minutes of the previous one, the messages go into one Event,
//     "(combined from similar events): <latest>", counted like any other;
//   - each object and type has a token bucket, a burst of 25 then one
//     Event per 5 minutes; an Event over it is dropped (logged at debug);
//   - recording never blocks: Events wait in a queue of 1000 (one more is
//     dropped, with a rate-limited log line), written by one goroutine with
//     a few jittered retries; a 4xx other than 409 and 429 is not retried.
//
// The Node reference comes from the node watch's cache, so recording costs
// no Node read.
//
// Why our own recorder: client-go's tools/record is the only package of
// the agent that links strategic merge patch and with it
// kube-openapi, gnostic-models' OpenAPI v2 and v3, protobuf's descriptorpb
// and go-openapi/swag: about 0.7 ms of package initializers on every start
// and 1.5 MB of binary, to build a patch of three fields. We send that
// patch as a JSON merge patch.
//
// Why the core API and not tools/events (events.k8s.io): the latter folds
// every Event with the same reason within 6 minutes into a series on the
// first one and keeps only the first note, so a second, different failure
// (rules file deleted, then replaced by a directory) would not be readable;
// the core recorder keeps differing messages apart. featureplug's RBAC
// allows both API groups.
type Recorder struct {
	node    string
	nodeUID func() types.UID
	log     *slog.Logger
	clock   clock.Clock
	queue   chan eventWrite
	started atomic.Bool

	mu         sync.Mutex
	seen       *lru.Cache // eventKey -> eventSeen
	aggregates *lru.Cache // eventKey (message "") -> *eventAggregate
	buckets    *lru.Cache // eventKey (type only) -> flowcontrol.PassiveRateLimiter
	lastName   int64      // the last name suffix given, so that names are unique
	dropped    int        // Events dropped on a full queue since the last log line
	droppedLog time.Time  // when that line was last written
}

// eventKey identifies Events (all about the agent's Node) for dedupe;
// with Message "" (and combined) for aggregation, with Reason "" too for
// rate limits.
type eventKey struct {
	uid                  types.UID
	typ, reason, message string
	combined             bool
}

// eventSeen is the last Event written under one key.
type eventSeen struct {
	name  string
	first metav1.Time
	count int32
}

// eventAggregate is the different messages of one object, type and
// reason lately seen.
type eventAggregate struct {
	messages map[string]bool
	last     time.Time
}

// eventWrite is an Event to create or, with patch, to patch.
type eventWrite struct {
	event *corev1.Event
	patch []byte // a JSON merge patch of event.Name; nil: create
}

// New returns a Recorder of Events about the Node in the default
// namespace:
// the API server accepts an Event about a cluster-scoped object only there
// (or in kube-system), where the kubelet writes its own node Events; in any
// other namespace it is rejected with "involvedObject.namespace: does not
// match event.namespace". nodeUID gives the Node's UID ("" when unknown).
// Nothing is sent until start; what is recorded before waits in the queue.
func New(node string, nodeUID func() types.UID, log *slog.Logger) *Recorder {
	return newWith(node, nodeUID, log, clock.RealClock{}, eventQueueSize)
}

// newWith is New with a clock and a queue size of the caller's (tests).
func newWith(node string, nodeUID func() types.UID, log *slog.Logger, clk clock.Clock, queue int) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{
		node:       node,
		nodeUID:    nodeUID,
		log:        log,
		clock:      clk,
		queue:      make(chan eventWrite, queue),
		seen:       lru.New(eventCacheSize),
		aggregates: lru.New(eventCacheSize),
		buckets:    lru.New(eventCacheSize),
	}
}

// Start writes recorded Events to the API server until ctx ends; a second
// call does nothing.
func (r *Recorder) Start(ctx context.Context, client Client) {
	if r.started.Swap(true) {
		return
	}
	events := client.Events(metav1.NamespaceDefault)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case w := <-r.queue:
				r.write(ctx, events, w)
			}
		}
	}()
}

// Warn records a Warning event. It never blocks on the API server.
func (r *Recorder) Warn(reason, message string) {
	r.record(corev1.EventTypeWarning, reason, message)
}

// Normal records a Normal event, with the same dedupe, aggregation and
// rate limits as Warn.
func (r *Recorder) Normal(reason, message string) {
	r.record(corev1.EventTypeNormal, reason, message)
}

// record correlates an Event with the earlier ones (aggregation, dedupe,
// rate limit, in the core recorder's order) and queues what is to be
// written.
func (r *Recorder) record(typ, reason, message string) {
	message = eventCut(message)
	uid := r.nodeUID()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	key := eventKey{uid: uid, typ: typ, reason: reason, message: message}
	if r.aggregate(key, now) {
		key = eventKey{uid: uid, typ: typ, reason: reason, combined: true}
		message = eventCombinedPrefix + message
	}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: r.name(now), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.node, UID: uid},
		Reason:         reason,
		Message:        message,
		FirstTimestamp: metav1.NewTime(now),
		LastTimestamp:  metav1.NewTime(now),
		Count:          1,
		Type:           typ,
		Source:         corev1.EventSource{Component: eventComponent, Host: r.node},
	}
	w := eventWrite{event: ev}
	if v, ok := r.seen.Get(key); ok {
		s := v.(eventSeen)
		ev.Name, ev.FirstTimestamp, ev.Count = s.name, s.first, s.count+1
		w.patch = eventPatch(ev)
	}
	r.seen.Add(key, eventSeen{name: ev.Name, first: ev.FirstTimestamp, count: ev.Count})

	if !r.allow(eventKey{uid: uid, typ: typ}) {
		r.log.Debug("Event dropped: over the rate limit of its object (a burst of 25, then one per 5 minutes)",
			"type", typ, "reason", reason, "message", message)
		return
	}
	select {
	case r.queue <- w:
	default:
		r.dropped++
		if r.droppedLog.IsZero() || now.Sub(r.droppedLog) >= eventDropLogEvery {
			r.log.Warn("Event queue full (the API server is slow or unreachable); Events dropped",
				"dropped", r.dropped, "queue", cap(r.queue), "reason", reason, "message", message)
			r.dropped, r.droppedLog = 0, now
		}
	}
}

// aggregate notes key's message among the recent ones of its object, type
// and reason; it returns whether the Event goes into the combined Event:
// a message not seen lately when eventAggregateMax-1 others were. The
// record expires eventAggregateWindow after its last Event. r.mu is held.
func (r *Recorder) aggregate(key eventKey, now time.Time) bool {
	akey := key
	akey.message = ""
	var a *eventAggregate
	if v, ok := r.aggregates.Get(akey); ok {
		a = v.(*eventAggregate)
	}
	if a == nil || now.Sub(a.last) > eventAggregateWindow {
		a = &eventAggregate{messages: map[string]bool{}}
		r.aggregates.Add(akey, a)
	}
	a.last = now
	if a.messages[key.message] {
		return false
	}
	if len(a.messages) >= eventAggregateMax-1 {
		return true
	}
	a.messages[key.message] = true
	return false
}

// allow takes a token from key's bucket. r.mu is held.
func (r *Recorder) allow(key eventKey) bool {
	var b flowcontrol.PassiveRateLimiter
	if v, ok := r.buckets.Get(key); ok {
		b = v.(flowcontrol.PassiveRateLimiter)
	} else {
		b = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(eventSpamQPS, eventSpamBurst, r.clock)
		r.buckets.Add(key, b)
	}
	return b.TryAccept()
}

// name returns a new Event name as the core recorder makes them,
// "<node>.<hex nanoseconds>", made unique within the process when the
// clock has not moved (a coarse or fake clock); "featureplug.<hex>" when
// that is no valid name (a node name near the 253 characters limit).
// r.mu is held.
func (r *Recorder) name(now time.Time) string {
	n := now.UnixNano()
	if n <= r.lastName {
		n = r.lastName + 1
	}
	r.lastName = n
	name := fmt.Sprintf("%v.%x", r.node, n)
	if len(validation.IsDNS1123Subdomain(name)) != 0 {
		name = fmt.Sprintf("%s.%x", eventComponent, n)
	}
	return name
}

// eventPatch is the JSON merge patch that makes the Event ev.Name what ev
// says: the three fields a repeat changes.
func eventPatch(ev *corev1.Event) []byte {
	p, err := json.Marshal(struct {
		Count         int32       `json:"count"`
		LastTimestamp metav1.Time `json:"lastTimestamp"`
		Message       string      `json:"message"`
	}{ev.Count, ev.LastTimestamp, ev.Message})
	if err != nil {
		panic(fmt.Sprintf("events: encoding a patch: %v", err)) // static types: cannot fail
	}
	return p
}

// eventCut cuts message to eventMaxMessage bytes, at a character boundary,
// ending with "...".
func eventCut(message string) string {
	if len(message) <= eventMaxMessage {
		return message
	}
	n := eventMaxMessage - 3
	for n > 0 && !utf8.RuneStart(message[n]) {
		n--
	}
	return message[:n] + "..."
}

// write writes w, retrying failures that may pass (the API server
// unreachable, 5xx, 409, 429) with a jittered, doubling delay; it gives up
// after eventWriteTries tries, on another 4xx, or when ctx ends.
func (r *Recorder) write(ctx context.Context, events Events, w eventWrite) {
	backoff := wait.Backoff{Duration: eventRetryDelay, Factor: 2, Jitter: eventRetryJitter, Steps: eventWriteTries}
	for try := 1; ; try++ {
		err := r.send(ctx, events, w)
		if err == nil || ctx.Err() != nil {
			return
		}
		if !eventRetriable(err) || try == eventWriteTries {
			r.log.Warn("Event not written", "reason", w.event.Reason, "event", w.event.Name, "tries", try, "err", err)
			return
		}
		r.log.Debug("Event not written; trying again", "reason", w.event.Reason, "event", w.event.Name, "try", try, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(backoff.Step()):
		}
	}
}

// send writes w once: the patch of a repeat, or (without one, or when the
// Event is gone) the whole Event.
func (r *Recorder) send(ctx context.Context, events Events, w eventWrite) error {
	ctx, cancel := context.WithTimeout(ctx, eventWriteTimeout)
	defer cancel()
	if w.patch != nil {
		_, err := events.Patch(ctx, w.event.Name, types.MergePatchType, w.patch, metav1.PatchOptions{})
		if !apierrors.IsNotFound(err) {
			return err
		}
	}
	_, err := events.Create(ctx, w.event, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // an earlier try that timed out wrote it
	}
	return err
}

// eventRetriable says whether a write that failed with err may pass when
// tried again: not after a 4xx other than 409 (conflict) and 429 (too
// many requests).
func eventRetriable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // the API server unreachable, a timeout
	}
	code := status.Status().Code
	return code < 400 || code >= 500 || code == 409 || code == 429
}
