package natsstore

import (
	"context"

	"agentsociety/store"
)

// Rounds returns how many rounds of two changes or more the group commit
// has sent.
func (s *Store) Rounds() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.round
}

// ApplyAll applies cs as concurrent Applies would that all arrived while
// a write was in flight: queued together, and written in rounds by one
// commitQueue. It returns each change's error.
func (s *Store) ApplyAll(ctx context.Context, cs []store.Change) []error {
	reqs := make([]*applyReq, len(cs))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.qmu.Lock()
	for i := range cs {
		reqs[i] = &applyReq{ctx: ctx, c: &cs[i]}
		s.queue = append(s.queue, reqs[i])
	}
	s.qmu.Unlock()
	s.commitQueue()
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
