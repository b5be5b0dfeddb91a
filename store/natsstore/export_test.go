package natsstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"agentsociety/store"
)

// Rounds returns how many flights or rounds of two changes or more the
// group commit has sent.
func (s *Store) Rounds() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.round
}

// ApplyAll applies cs as concurrent Applies would that all arrived while
// a write was in flight: queued together, and written in flights (or
// rounds) by one goroutine. It returns each change's error.
func (s *Store) ApplyAll(ctx context.Context, cs []store.Change) []error {
	reqs := make([]*applyReq, len(cs))
	s.mu.Lock()
	s.qmu.Lock()
	for i := range cs {
		reqs[i] = &applyReq{ctx: ctx, c: &cs[i]}
		s.queue = append(s.queue, reqs[i])
	}
	s.qmu.Unlock()
	if s.pipelined() {
		for _, r := range reqs {
			s.await(r) // unlocks
			if r.journal != nil {
				s.cleanupLater(ctx, r.journal)
			}
			s.mu.Lock()
		}
		s.mu.Unlock()
	} else {
		s.commitQueue()
		s.mu.Unlock()
		for _, r := range reqs {
			if r.journal != nil {
				s.cleanupLater(ctx, r.journal)
			}
		}
	}
	errs := make([]error, len(cs))
	for i, r := range reqs {
		errs[i] = r.err
	}
	return errs
}

// NewClaimingLater opens a store as New does with Fence, but claims
// nothing: the test claims the bucket and the event log itself, with
// ClaimBucket and ClaimEvents, to let another store claim between them.
func NewClaimingLater(ctx context.Context, opts Options) (*Store, error) {
	opts.Fence = false
	s, err := New(ctx, opts)
	if err == nil {
		s.opts.Fence = true
	}
	return s, err
}

// ClaimBucket is claimBucket.
func (s *Store) ClaimBucket(ctx context.Context) (uint64, error) { return s.claimBucket(ctx) }

// ClaimEvents is claimEvents.
func (s *Store) ClaimEvents(ctx context.Context, claimed uint64) error {
	return s.claimEvents(ctx, claimed)
}

// ApplyFlights applies each group of cs as one flight, all of them sent
// before the first is settled, and returns each change's error, by group.
// It fails if a group did not go out as one flight.
func (s *Store) ApplyFlights(ctx context.Context, groups [][]store.Change) ([][]error, error) {
	s.mu.Lock()
	var reqs [][]*applyReq
	for _, cs := range groups {
		rs := make([]*applyReq, len(cs))
		s.qmu.Lock()
		for i := range cs {
			rs[i] = &applyReq{ctx: ctx, c: &cs[i]}
			s.queue = append(s.queue, rs[i])
		}
		s.qmu.Unlock()
		s.sendQueue()
		for _, r := range rs {
			if r.flight == nil || r.flight != rs[0].flight {
				s.mu.Unlock()
				return nil, fmt.Errorf("the group of %d changes did not go out as one flight", len(cs))
			}
		}
		reqs = append(reqs, rs)
	}
	if n := len(s.flights); n != len(groups) {
		s.mu.Unlock()
		return nil, fmt.Errorf("%d flights in the air, want %d", n, len(groups))
	}
	if s.testSettleAfter > 0 {
		// The settler is away: the answers wait in the subscription.
		s.mu.Unlock()
		time.Sleep(s.testSettleAfter)
		s.mu.Lock()
	}
	errs := make([][]error, len(reqs))
	for g, rs := range reqs {
		for _, r := range rs {
			s.await(r) // unlocks
			s.mu.Lock()
			errs[g] = append(errs[g], r.err)
		}
	}
	s.mu.Unlock()
	return errs, nil
}

// SettleAfter makes ApplyFlights wait for d after sending its flights,
// before it settles them.
func (s *Store) SettleAfter(d time.Duration) { s.testSettleAfter = d }

// TrimPoints returns, for each before from 0 to the newest event's Seq
// plus 2, where a trim would cut the event log as the store's index of
// its appends says (0 where it cannot tell) and as reading the stream
// does.
func (s *Store) TrimPoints(ctx context.Context) (indexed, read []uint64, err error) {
	info, err := s.events.Info(ctx)
	if err != nil {
		return nil, nil, err
	}
	st := info.State
	s.emu.Lock()
	newest := s.evNext
	s.emu.Unlock()
	for before := uint64(0); before <= newest+1; before++ {
		s.emu.Lock()
		keep, _ := s.trimPoint(st.FirstSeq, st.LastSeq, before)
		s.emu.Unlock()
		indexed = append(indexed, keep)
		keep, err = s.readTrimPoint(ctx, st.FirstSeq, st.LastSeq, before)
		if err != nil {
			return nil, nil, err
		}
		read = append(read, keep)
	}
	return indexed, read, nil
}

// Registry returns how many contact keys the index lists under owner, and
// how many of those are no longer live.
func (s *Store) Registry(owner string) (keys, dead int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reg := s.registries[tok(owner)]; reg != nil {
		return len(reg.keys), reg.dead
	}
	return 0, 0
}

// SetMaxBatch sets Options.MaxBatch.
func (s *Store) SetMaxBatch(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.MaxBatch = n
}

// StopAfterJournal makes a removal beyond one batch stop once its first
// batch, with the journal, is written, as if the process had died.
func (s *Store) StopAfterJournal(stop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.testStopAfterJournal = stop
}

// Cleanup deletes the records of the removals recorded that the store
// has not deleted (see StopAfterJournal), without reading the bucket
// first, as a store does right after it recorded one.
func (s *Store) Cleanup(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range slices.Clone(s.journals) {
		s.cleanup(ctx, j)
	}
}

// IndexLen returns how many keys the store's index knows of.
func (s *Store) IndexLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.revs)
}

// BetweenBatches makes the Apply of a removal beyond one batch call f
// between the batches that delete what it removed.
func (s *Store) BetweenBatches(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.testBetweenBatches = f
}

// Unlocked reports whether no one holds s.mu.
func (s *Store) Unlocked() bool {
	if !s.mu.TryLock() {
		return false
	}
	s.mu.Unlock()
	return true
}

// MaxBumps is how many pending messages a sweep writes again at most.
const MaxBumps = maxBumps

// SweepAfter makes the store sweep once n messages have ended since the
// last sweep (see ends.go).
func (s *Store) SweepAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepAfter = n
}

// Sweeps returns how many sweeps the store has made.
func (s *Store) Sweeps() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweeps
}

// SweepNow makes a sweep as if one were due.
func (s *Store) SweepNow() {
	s.mu.Lock()
	s.sinceSweep = s.sweepAfter
	s.mu.Unlock()
	s.sweep()
}

// Present returns how many pending keys the store's list of those the
// bucket holds names (see ends.go).
func (s *Store) Present() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.present)
}
