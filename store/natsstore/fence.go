package natsstore

import (
	"context"
	"fmt"
	"strconv"
)

// keyFence is the key a store opened with Options.Fence writes to claim
// its bucket. Load skips it.
const keyFence = "fence"

// claim makes s its bucket's one writer (see Options.Fence): it claims
// the bucket, then the event log (see claimEvents).
func (s *Store) claim(ctx context.Context) error {
	seq, err := s.claimBucket(ctx)
	if err != nil {
		return err
	}
	return s.claimEvents(ctx, seq)
}

// claimBucket writes keyFence, after which a write of any store that
// claimed the bucket before is refused by the server, and returns the
// key's revision. The write expects nothing, so that a deposed store still
// writing cannot keep it from landing; what the stream holds before it is
// what Load reads.
func (s *Store) claimBucket(ctx context.Context) (uint64, error) {
	id := newID()
	s.mu.Lock()
	defer s.mu.Unlock()
	seq, err := s.send(ctx, []write{{key: keyFence, data: []byte(id)}}, false)
	if err != nil {
		return 0, fmt.Errorf("claiming the bucket: %w", err)
	}
	s.last, s.claimed, s.claimID = seq, seq, id
	s.claimedHeader = []string{strconv.FormatUint(seq, 10)}
	return seq, nil
}

// Fenced returns a channel that is closed once the store is fenced: with
// Options.Fence, when another store has claimed its bucket or a write's
// outcome was unknown. It is never closed for a store without it.
func (s *Store) Fenced() <-chan struct{} { return s.fenced }

func (s *Store) isFenced() bool {
	select {
	case <-s.fenced:
		return true
	default:
		return false
	}
}

// fence marks s fenced and returns the error its writes fail with.
func (s *Store) fence(cause error) error {
	s.fencedOnce.Do(func() {
		close(s.fenced)
		s.log.Warn("natsstore: fenced: this store writes no more", "bucket", s.opts.Bucket, "cause", cause)
	})
	return fmt.Errorf("%w (%v)", ErrFenced, cause)
}
