package inspect

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	as "agentsociety"
)

// maxArtifacts bounds the artifacts the inspector lists: the newest are
// kept.
const maxArtifacts = 1000

// derived is what the page shows that only the event log tells: how many
// messages wait for each agent, what each is handling, the open requests
// and the artifacts. It folds the events in as it is asked, from where it
// stopped, so that each request reads only the events since the last.
//
// Nothing in it grows for the society's life: a count or a turn is
// dropped when its messages are delivered or handled, a request when it
// is settled or its requester has ended (the society then never settles
// it), the artifacts beyond maxArtifacts; and when events it had not read
// are no longer kept, all but the artifacts is dropped, since what those
// events ended cannot be told.
type derived struct {
	s  *as.Society
	mu sync.Mutex
	// next is the seq of the next event to fold in.
	next     uint64
	queued   map[string]int    // agent → messages accepted for it, not delivered yet
	handling map[string]string // agent → the message it is handling
	open     map[string]*openRequest
	arts     []artifactItem // oldest first, at most maxArtifacts
}

func newDerived(s *as.Society) *derived {
	return &derived{s: s, next: 1, queued: map[string]int{}, handling: map[string]string{}, open: map[string]*openRequest{}}
}

// openRequest is a collaboration request not settled yet.
type openRequest struct {
	ID     string    `json:"id"`
	Task   string    `json:"task,omitempty"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Opened time.Time `json:"opened"`
	// Subtask is what the requester asked for.
	Subtask string `json:"subtask,omitempty"`
	// TimeoutSeconds and Deadline are set when the request has a timeout:
	// then the society settles it at Deadline if nobody answered.
	TimeoutSeconds float64   `json:"timeout_seconds,omitempty"`
	Deadline       time.Time `json:"deadline,omitzero"`
	// Stuck is set once the watchdog reported the request.
	Stuck bool `json:"stuck,omitempty"`
}

// artifactItem is an artifact as the list shows it.
type artifactItem struct {
	ID     string    `json:"id"`
	Ref    string    `json:"ref"`
	Name   string    `json:"name"`
	By     string    `json:"created_by"`
	Task   string    `json:"task,omitempty"`
	Stored time.Time `json:"stored"`
}

// queueState is a copy of the queues, as of event last.
type queueState struct {
	last     uint64
	queued   map[string]int
	handling map[string]string
}

// catchUp folds in the events since the last call. Called with d.mu held.
func (d *derived) catchUp(ctx context.Context) {
	ended := false
	defer func() {
		if ended {
			d.dropEnded()
		}
	}()
	for e, err := range d.s.Events(ctx, d.next) {
		if err != nil {
			var me *as.MissedEventsError
			if errors.As(err, &me) {
				// What the missed events ended is lost: forget what came
				// before them, as the events no longer kept are not
				// counted. A count may be short then, never negative.
				clear(d.queued)
				clear(d.handling)
				clear(d.open)
				d.next = me.Oldest
				continue
			}
			return // a store that fails to read; the next call tries again
		}
		d.fold(e)
		d.next = e.Seq + 1
		ended = ended || e.Kind == as.EventAgentTerminated
	}
}

// dropEnded drops the open requests whose requester has ended, after an
// agent was terminated: the society settles a request to an agent that
// ended, but not one from an agent that ended (its subtree ends with it,
// in one event), and later forgets it without an event. Called with d.mu
// held.
func (d *derived) dropEnded() {
	for id, r := range d.open {
		if a, ok := d.s.Agent(r.From); !ok || a.Status == as.StatusTerminated {
			delete(d.open, id)
		}
	}
}

// fold applies e. Called with d.mu held.
func (d *derived) fold(e as.Event) {
	switch e.Kind {
	case as.EventMessageAccepted:
		d.queued[e.Target]++
	case as.EventMessageDelivered:
		if d.queued[e.Agent] > 1 {
			d.queued[e.Agent]--
		} else {
			delete(d.queued, e.Agent)
		}
		d.handling[e.Agent] = e.Turn
	case as.EventMessageHandled:
		if d.handling[e.Agent] == e.Turn {
			delete(d.handling, e.Agent)
		}
	case as.EventAgentTerminated:
		delete(d.handling, e.Target)
	case as.EventRequestOpened:
		r := &openRequest{ID: e.Request, Task: e.Task, From: e.Agent, To: e.Target, Opened: e.Time}
		if e.Message != nil {
			r.Opened = e.Message.SentAt
			var p as.CollaborationRequestPayload
			if e.Message.Decode(&p) == nil {
				r.Subtask = p.SubtaskDescription
				if p.TimeoutSeconds > 0 {
					r.TimeoutSeconds = p.TimeoutSeconds
					r.Deadline = r.Opened.Add(time.Duration(p.TimeoutSeconds * float64(time.Second)))
				}
			}
		}
		d.open[e.Request] = r
	case as.EventRequestSettled:
		delete(d.open, e.Request)
	case as.EventRequestStuck:
		if r := d.open[e.Request]; r != nil {
			r.Stuck = true
		}
	case as.EventArtifactStored:
		if len(d.arts) == maxArtifacts {
			d.arts = slices.Delete(d.arts, 0, 1)
		}
		d.arts = append(d.arts, artifactItem{ID: e.Artifact, Ref: as.ArtifactRefPrefix + e.Artifact, Name: e.Name, By: e.Agent, Task: e.Task, Stored: e.Time})
	}
}

// queues returns the queues as of the newest event.
func (d *derived) queues(ctx context.Context) queueState {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.catchUp(ctx)
	return queueState{last: d.next - 1, queued: maps.Clone(d.queued), handling: maps.Clone(d.handling)}
}

// openRequests returns the open requests, oldest first.
func (d *derived) openRequests(ctx context.Context) []openRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.catchUp(ctx)
	out := make([]openRequest, 0, len(d.open))
	for _, r := range d.open {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b openRequest) int { return a.Opened.Compare(b.Opened) })
	return out
}

// artifactList returns the artifacts stored, oldest first.
func (d *derived) artifactList(ctx context.Context) []artifactItem {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.catchUp(ctx)
	return append([]artifactItem{}, d.arts...)
}
