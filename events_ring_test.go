package agentsociety

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"pgregory.net/rapid"
)

// TestEventRing: whatever the retention (within a block of the ring, or
// over several, the last one short) and however many events were added,
// whole or in the short form of a message's events, the ring gives back the
// newest it keeps, in order, each as it was made, at times that never go
// back.
func TestEventRing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keep := rapid.IntRange(1, 3*ringBlock+7).Draw(t, "retention")
		n := rapid.IntRange(0, 4*ringBlock).Draw(t, "events")
		kinds := rapid.SliceOfN(rapid.SampledFrom([]entryKind{entryWhole, entryAccepted, entryDelivered, entryHandled}), n, n).Draw(t, "kinds")
		l := newEventLog(keep, nil, 1, nil)
		msgs := make([]*Message, n)
		var delivered int64
		for i, k := range kinds {
			m := &Message{ID: fmt.Sprint("m", i+1), From: "a", To: "b", TaskID: "t", SentAt: time.Now()}
			msgs[i] = m
			switch k {
			case entryWhole:
				l.add(func(e *Event) { e.Kind, e.Count = EventConsole, i+1 })
			case entryDelivered:
				delivered = l.addMessage(k, m, "", 0)
			default:
				l.addMessage(k, m, "turn", delivered)
			}
		}
		got, oldest, _ := l.fromRing(1, make([]Event, 0, n+1))
		want := max(1, n-keep+1)
		if n == 0 {
			want = 1
		}
		if oldest != uint64(want) || len(got) != n-want+1 {
			t.Fatalf("retention %d, %d events: the ring holds %d events from %d, want %d from %d", keep, n, len(got), oldest, n-want+1, want)
		}
		for i, e := range got {
			seq := uint64(want + i)
			m := msgs[seq-1]
			var w Event
			switch kinds[seq-1] {
			case entryWhole:
				w = Event{Kind: EventConsole, Count: int(seq)}
			case entryAccepted:
				w = Event{Kind: EventMessageAccepted, Task: "t", Agent: "a", Turn: "turn", Target: "b", Message: m}
				if !e.Time.Equal(m.SentAt) && !(i > 0 && e.Time.Equal(got[i-1].Time)) {
					t.Fatalf("event %d, message_accepted, at %v: not its message's time %v (nor, if that is earlier, the previous event's)", seq, e.Time, m.SentAt)
				}
			case entryDelivered:
				w = Event{Kind: EventMessageDelivered, Task: "t", Agent: "b", Turn: m.ID, Message: m}
			case entryHandled:
				w = Event{Kind: EventMessageHandled, Task: "t", Agent: "b", Turn: m.ID, Duration: e.Duration}
				if e.Duration < 0 {
					t.Fatalf("event %d, message_handled: duration %v", seq, e.Duration)
				}
			}
			w.Seq, w.Time = seq, e.Time
			if diff := cmp.Diff(w, e); diff != "" {
				t.Fatalf("retention %d, %d events: event %d of the ring (-want +got):\n%s", keep, n, seq, diff)
			}
			if i > 0 && e.Time.Before(got[i-1].Time) {
				t.Fatalf("event %d at %v, before event %d at %v", seq, e.Time, seq-1, got[i-1].Time)
			}
		}
	})
}

// TestEventClock: the events' clock tells the wall clock's time, read
// again once its last reading is clockAnchor old.
func TestEventClock(t *testing.T) {
	c := newClock()
	before := time.Now()
	at := c.wall(c.mono())
	if after := time.Now(); at < before.Add(-time.Millisecond).UnixNano() || at > after.Add(time.Millisecond).UnixNano() {
		t.Fatalf("clock says %v, between %v and %v", time.Unix(0, at), before, after)
	}
	// The wall clock "jumps" an hour ahead: the clock goes on from its
	// reading until that is clockAnchor old, then follows.
	c.anchorWall += int64(time.Hour)
	if at := c.wall(c.mono()); at < time.Now().Add(50*time.Minute).UnixNano() {
		t.Fatalf("clock read the wall clock again within clockAnchor: %v", time.Unix(0, at))
	}
	if at := c.wall(c.mono() + clockAnchor); at > time.Now().Add(time.Minute).UnixNano() {
		t.Fatalf("clock did not read the wall clock again after clockAnchor: %v", time.Unix(0, at))
	}
}

// TestEventLog_FollowEndsAfterTheLastEvent: a follower that finds its
// society stopped (follow closed) and a last event both ready when it
// waits yields that event before it ends: an event logged before the end
// is never missed, whichever of the two its wait picks.
func TestEventLog_FollowEndsAfterTheLastEvent(t *testing.T) {
	for i := range 64 {
		l := newEventLog(16, nil, 1, nil)
		follow := make(chan struct{})
		l.testFollowWait = func() {
			// The follower found nothing new and is about to wait: the
			// last event comes, and the society stops.
			l.testFollowWait = nil
			l.add(func(*Event) {})
			close(follow)
		}
		n := 0
		for range l.read(context.Background(), 1, follow) {
			n++
		}
		if n != 1 {
			t.Fatalf("round %d: the follower ended with %d events, want the 1 logged before its end", i, n)
		}
	}
}
