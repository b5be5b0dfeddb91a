package natsstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"agentsociety/store"
)

// Group commit. Apply queues its change and then takes s.mu; whoever holds
// s.mu writes every change queued (commitQueue). So the Applies that
// arrive while a write is in flight go out together in the next round,
// with one wait for all their answers, instead of one round trip each.
//
// Each change of a round is still its own write, a plain message or its
// own atomic batch, with its own answer from the server: one change's
// failure is not another's. A round holds only changes whose keys differ,
// since a change is planned against the revisions of its keys as the
// index knows them before the round.
//
// On a bucket whose stream has several replicas, a round goes instead as
// one atomic batch, of at most Options.MaxBatch writes (commitBatch): a
// replicated stream takes one expectation of a subject's sequence at a
// time, refusing a second while the first is in flight, and every change
// of a round expects the fence key's (see below).
//
// With Options.Fence, the first message of each change expects two things
// of the stream: its last sequence to be the one the changes before it in
// the round leave, and the fence key's revision to be the one this store's
// claim wrote. The second is what keeps the fence: a store deposed by
// another's claim writes nothing, whatever the other wrote since (the
// first alone could be lined up again by another store's writes after a
// change of the round was refused). It stands in for the message's check
// of its own key's revision, which only another writer could fail, and no
// other writer writes without claiming first. A change refused makes
// those after it refused too (the stream's last sequence is not the one
// they expect), and they are tried again one by one, which tells a
// refused change from a deposed store.

// An applyReq is an Apply waiting for its change to be written.
type applyReq struct {
	ctx context.Context
	c   *store.Change
	// done and err are the result; guarded by s.mu.
	done bool
	err  error
}

// finish sets r's result; a request written in parts (see commitRound)
// keeps the first error of its parts.
func (r *applyReq) finish(err error) {
	if !r.done || r.err == nil {
		r.err = err
	}
	r.done = true
}

// planned is a request with the writes of its change, or of one part of
// it (see commitRound).
type planned struct {
	r    *applyReq
	c    *store.Change // what the writes record: r's change, or the part
	p    *plan
	ws   []write // the batch
	rest []write // dropped history messages left for later (see batchOf)
}

// commitQueue writes every change queued and finishes its request. Called
// with s.mu held.
func (s *Store) commitQueue() {
	s.qmu.Lock()
	reqs := s.queue
	s.queue = nil
	s.qmu.Unlock()
	for len(reqs) > 0 {
		reqs = s.commitRound(reqs)
	}
}

// commitRound writes the first requests of reqs in one round: those up to
// the first whose keys a request before it writes too. It returns the
// requests left. Called with s.mu held.
func (s *Store) commitRound(reqs []*applyReq) []*applyReq {
	var round []planned
	keys := make(map[string]bool)
	n, writes := 0, 0 // writes: of the round so far
	full := func(more int) bool { return s.replicated && len(round) > 0 && writes+more > s.opts.MaxBatch }
	for ; n < len(reqs); n++ {
		r := reqs[n]
		if err := r.ctx.Err(); err != nil {
			r.finish(err)
			continue
		}
		p, err := s.prepare(r.ctx, r.c) // reads the bucket, if at all, for the first only
		if err != nil || len(p.writes)+len(p.garbage) == 0 {
			r.finish(err) // refused, or nothing to write
			continue
		}
		if onlyFinishes(r.c) {
			// Each message's end is its own write: a batch of them would
			// cost a server on file storage a sync (see BenchmarkApply).
			if slices.ContainsFunc(p.writes, func(w write) bool { return keys[w.key] }) || full(len(p.writes)) {
				break
			}
			writes += len(p.writes)
			ids := make(map[string]string, len(r.c.Finished))
			for _, id := range r.c.Finished {
				ids[pendingKey(id)] = id
			}
			for _, w := range p.writes { // one per message pending
				keys[w.key] = true
				part := &plan{writes: []write{w}}
				round = append(round, planned{r: r, c: &store.Change{Finished: []string{ids[w.key]}}, p: part, ws: part.writes})
			}
			continue
		}
		ws, rest, err := s.batchOf(p)
		if err != nil {
			r.finish(err)
			continue
		}
		if slices.ContainsFunc(ws, func(w write) bool { return keys[w.key] }) || full(len(ws)) {
			break
		}
		writes += len(ws)
		for _, w := range ws {
			keys[w.key] = true
		}
		round = append(round, planned{r: r, c: r.c, p: p, ws: ws, rest: rest})
	}
	s.pipeline(round)
	return reqs[n:]
}

// pipeline sends the writes of round, each change its own write, then
// waits for their answers, and finishes each request: committed, refused,
// or of unknown outcome. A change refused is tried again on its own (see
// applyOne), which learns its keys again if another writer changed them.
// Called with s.mu held.
func (s *Store) pipeline(round []planned) {
	switch {
	case len(round) == 0:
		return
	case len(round) == 1:
		// As before group commit: on the request's context, with no
		// reply subscription to wait on.
		round[0].r.finish(s.applyOne(round[0].r.ctx, round[0].c, round[0].p))
		return
	case s.opts.Fence && s.isFenced():
		for _, pl := range round {
			pl.r.finish(fmt.Errorf("%w", ErrFenced))
		}
		return
	case s.replicated:
		s.commitBatch(round)
		return
	}
	// The round is everyone's: no one request's context ends it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(round[0].r.ctx), s.opts.Timeout)
	defer cancel()
	if s.replies == nil {
		s.inbox = s.nc.NewInbox()
		sub, err := s.nc.SubscribeSync(s.inbox + ".>")
		if err != nil {
			for _, pl := range round {
				pl.r.finish(fmt.Errorf("natsstore: subscribing to the server's answers: %w", err))
			}
			return
		}
		s.replies = sub
	}
	s.round++
	prefix := s.inbox + "." + strconv.FormatUint(s.round, 10) + "."

	// Send: sent counts the changes whose every message went out.
	sent, last := 0, s.last
send:
	for i, pl := range round {
		ms := s.messages(pl.ws, s.opts.Fence, s.opts.Fence, last)
		ms[len(ms)-1].Reply = prefix + strconv.Itoa(i)
		for _, m := range ms {
			if s.nc.PublishMsg(m) != nil {
				break send
			}
		}
		sent++
		last += uint64(len(pl.ws))
	}

	// Wait for the answers to what went out.
	answers := make([][]byte, sent)
	answered := make([]bool, sent)
	var waitErr error
	for got := 0; got < sent; {
		m, err := s.replies.NextMsgWithContext(ctx)
		if err != nil {
			waitErr = fmt.Errorf("natsstore: committing a change: %w", err)
			break
		}
		i, err := strconv.Atoi(strings.TrimPrefix(m.Subject, prefix))
		if !strings.HasPrefix(m.Subject, prefix) || err != nil || i < 0 || i >= sent || answered[i] {
			continue // an answer to an earlier round that was given up on
		}
		answers[i], answered[i] = m.Data, true
		got++
	}

	// Each change by its answer. With the fence, one refused or not
	// answered leaves those after it expecting a last sequence the
	// stream may not have: they are left for later, one by one.
	var garbage, later []planned
	for i, pl := range round {
		if i >= sent {
			later = append(later, pl) // not sent whole: the connection failed
			continue
		}
		err := waitErr
		var seq uint64
		if answered[i] {
			seq, err = readAck(answers[i], len(pl.ws))
		}
		var rej *rejection
		switch {
		case err == nil && s.opts.Fence && len(later) > 0:
			// Written, after a change of the round that was not: its
			// expected last sequence was met by another store's writes,
			// which did not claim the bucket first.
			s.fence(errors.New("another store wrote to the bucket without claiming it"))
			s.committed(pl.p, pl.ws, seq)
			pl.r.finish(nil)
		case s.opts.Fence && len(later) > 0:
			later = append(later, pl) // expected a last sequence the stream has not
		case err == nil:
			if s.opts.Fence {
				s.last = seq
			}
			s.committed(pl.p, pl.ws, seq)
			garbage = append(garbage, pl)
			pl.r.finish(nil)
		case errors.As(err, &rej):
			later = append(later, pl)
		case s.opts.Fence:
			// No answer, or one that does not parse: it may or may not
			// have been stored, and this store cannot tell its own
			// writes from another's.
			err = s.fence(err)
			pl.r.finish(err)
			later = append(later, pl)
		default:
			// It may or may not have been stored: forget what this
			// Store knows, so that the next call reads the bucket again.
			s.indexed = false
			pl.r.finish(err)
		}
	}
	for _, pl := range garbage {
		s.collect(ctx, pl.rest)
	}
	s.oneByOne(later, len(round))
}

// oneByOne writes the changes of a round of n that the round did not
// write, one at a time (applyOne), which tells a refused change from a
// deposed store and learns what it must. A request written in parts keeps
// the error of a part that failed. Called with s.mu held.
func (s *Store) oneByOne(later []planned, n int) {
	if len(later) > 0 {
		s.log.Debug("natsstore: changes of a round were refused; writing them one by one", "bucket", s.opts.Bucket, "changes", len(later), "of", n)
	}
	for _, pl := range later {
		if !pl.r.done || pl.r.err == nil {
			pl.r.finish(s.applyOne(pl.r.ctx, pl.c, nil))
		}
	}
}

// commitBatch writes round, on a replicated stream, as one atomic batch,
// which the server stores whole or not at all, and finishes each request.
// The batch is one change's write as publish makes it: with the fence,
// its first message expects the stream's last sequence to be this store's
// last write. A batch refused is written change by change (oneByOne).
// Called with s.mu held.
func (s *Store) commitBatch(round []planned) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(round[0].r.ctx), s.opts.Timeout)
	defer cancel()
	var ws []write
	for _, pl := range round {
		ws = append(ws, pl.ws...)
	}
	last, err := s.publish(ctx, ws)
	var rej *rejection
	switch {
	case err == nil:
		end := last - uint64(len(ws))
		for _, pl := range round {
			end += uint64(len(pl.ws))
			s.committed(pl.p, pl.ws, end)
			pl.r.finish(nil)
		}
		for _, pl := range round {
			s.collect(ctx, pl.rest)
		}
	case errors.As(err, &rej) && !s.isFenced():
		s.oneByOne(round, len(round))
	default: // fenced, or of unknown outcome
		if !s.opts.Fence {
			s.indexed = false // read the bucket again before the next change
		}
		for _, pl := range round {
			pl.r.finish(err)
		}
	}
}

// onlyFinishes reports whether c does nothing but finish messages, which
// the store may record one by one (see [store.Store]).
func onlyFinishes(c *store.Change) bool {
	rest := *c
	rest.Finished = nil
	return len(c.Finished) > 0 && rest.Empty()
}
