package agentsociety

import (
	"context"
	"testing"

	"pgregory.net/rapid"
)

// TestEventRing: whatever the retention (within a block of the ring, or
// over several, the last one short) and however many events were added,
// the ring gives back the newest it keeps, in order, each as it was made.
func TestEventRing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keep := rapid.IntRange(1, 3*ringBlock+7).Draw(t, "retention")
		n := rapid.IntRange(0, 4*ringBlock).Draw(t, "events")
		l := newEventLog(keep, nil, 1, nil)
		for i := range n {
			l.add(func(e *Event) { e.Count = i + 1 })
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
			if seq := uint64(want + i); e.Seq != seq || e.Count != int(seq) {
				t.Fatalf("retention %d, %d events: event %d of the ring is seq %d made as %d, want %d", keep, n, i, e.Seq, e.Count, seq)
			}
		}
	})
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
