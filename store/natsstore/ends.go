package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Ends of handled messages, with Options.Fence. A change that only
// finishes messages (the society writes those behind, many at a time) is
// not written as one deletion per pending key, each its own write with its
// own answer, but as one key of its own, e.<id>, that names each message
// ended by its pending key and the revision it ends: Load lists no pending
// message at a revision an end names (one accepted again since has
// another). The server so stores one message for the ends of many.
//
// The pending keys and the ends are then removed in bulk, by a sweep, once
// sweepAfter messages have ended since the last (the Apply that finds one due
// makes it, after its own change): it purges from the bucket's stream every
// pending key (ended, or deleted by a change that finished it among other
// records) below a revision, and the ends below the revision of the sweep
// before, which name only keys that sweep purged. Other changes go on
// meanwhile: none writes below the revision. A message still pending below it
// is first written again, to a revision above it (bumped), once the flights in
// the air have settled; the revision is chosen so that a sweep writes again at
// most one message for bumpRatio it purges, and at most maxBumps, so that a
// message that stays pending long holds up no sweep, and the bucket keeps at
// most about bumpRatio times the messages pending, besides the last sweepAfter
// ended.
//
// Only a store with Options.Fence does this: it is the bucket's one writer, so
// what its index says is below the revision is all the bucket holds there. A
// purge is not a write the server checks against the fence: a sweep first
// reads the fence key, and stops if another store has claimed the bucket. A
// store deposed since sweeps at most once more (its writes are refused, so it
// has no other ends to count, and a bump is refused), and purges only messages
// that are ended in the bucket, and ends that name only keys purged by a sweep
// made before the claim that deposed it: so a Load that started after that
// claim never sees a pending key whose end it does not see. A store of an
// earlier version takes an end's key for a corrupt record: once a node of this
// version has led, nodes of an earlier one cannot lead the cluster.

// prefixEnds starts the keys of the records of ends: e.<id>.
const prefixEnds = "e."

// sweepAfter is how many messages end, by default, between sweeps.
const sweepAfter = 2048

// bumpRatio bounds the messages a sweep writes again: at most one for
// bumpRatio keys it purges.
const bumpRatio = 8

// maxBumps bounds the messages a sweep writes again, each a read and a
// write while the store's other changes wait: a backlog of messages
// pending long is written again a part at each sweep.
const maxBumps = 256

// endsRec is a record of ends: each pending key and the revision ended.
type endsRec struct {
	Ends []keyRev `json:"ends"`
}

// appendEnd appends the JSON of one end to b.
func appendEnd(b []byte, e keyRev) []byte {
	data, _ := json.Marshal(e) // a string and a number: always encodes
	return append(b, data...)
}

// maxEndsPerRecord bounds the ends one record names.
const maxEndsPerRecord = 1024

// endParts returns the parts of r's change, which only finishes messages
// and is planned as p (one deletion per message pending): one record of
// ends for up to maxEndsPerRecord of them, and at most Options.MaxBatch,
// so that a part refused can be written again as a batch of deletions
// (see oneByOne), and no more than one message of the server's takes (as
// batchOf bounds a record: a write refused by the client part way through
// a batch would fence the store). Called with s.mu held.
func (s *Store) endParts(r *applyReq, p *plan) []planned {
	per := min(maxEndsPerRecord, s.opts.MaxBatch)
	limit := int(s.nc.MaxPayload() - writeHeaders)
	var parts []planned
	for lo := 0; lo < len(p.writes); {
		data := append(make([]byte, 0, 64*min(per, len(p.writes)-lo)), `{"ends":[`...)
		var ends []keyRev
		var msgs []string
		for _, d := range p.writes[lo:] {
			e := keyRev{d.key, d.expect}
			n := len(data)
			if len(ends) > 0 {
				data = append(data, ',')
			}
			if data = appendEnd(data, e); len(ends) > 0 && (len(ends) == per || len(data)+len("]}") > limit) {
				data = data[:n]
				break
			}
			ends, msgs = append(ends, e), append(msgs, d.msg)
		}
		data = append(data, "]}"...)
		w := write{key: prefixEnds + newID(), data: data, ends: ends}
		pl := planned{r: r, msgs: msgs, p: &plan{writes: []write{w}}}
		pl.ws = pl.p.writes
		if len(ends) == len(p.writes) {
			pl.c, pl.msgs = r.c, nil // the change whole
		}
		parts = append(parts, pl)
		lo += len(ends)
	}
	return parts
}

// ended records in the index that ends were written: each pending key
// the index knows live at the revision named is ended. Called with s.mu
// held.
func (s *Store) ended(ends []keyRev) {
	for _, e := range ends {
		if r := s.revs[e.Key]; r.live && r.seq == e.Rev {
			s.setRev(e.Key, rev{seq: e.Rev})
			s.ends[e.Key] = e.Rev
			s.sinceSweep++
		}
	}
	if s.sweepDue() {
		s.sweepWanted.Store(true)
	}
}

// minCompact is the length of s.present below which it is not compacted.
const minCompact = 1024

// notePresent adds to s.present that pending key was written at revision
// seq. Once the list has doubled since it was last compacted, it drops the
// keys written again since or forgotten (deleted, their markers expired),
// which hold nothing at the revision listed: the list then follows the
// keys the index knows, even when no sweep is due, as when messages end
// with other records (a turn's history), deleted rather than ended. Not
// while a sweep is under way, which trims the list by place. Called with
// s.mu held.
func (s *Store) notePresent(key string, seq uint64) {
	s.present = append(s.present, keyRev{key, seq})
	if len(s.present) < max(s.compactAt, minCompact) || s.sweeping {
		return
	}
	kept := s.present[:0]
	for _, k := range s.present {
		if s.revs[k.Key].seq == k.Rev {
			kept = append(kept, k)
		}
	}
	clear(s.present[len(kept):])
	s.present = kept
	s.compactAt = 2 * len(kept)
}

// readEnds returns the pending keys that the records of ends in entries
// name, by key: the revision ended.
func readEnds(entries map[string]jetstream.KeyValueEntry) (map[string]uint64, error) {
	ends := make(map[string]uint64)
	for key, e := range entries {
		if !strings.HasPrefix(key, prefixEnds) || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var rec endsRec
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return nil, fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
		}
		for _, r := range rec.Ends {
			ends[r.Key] = max(ends[r.Key], r.Rev)
		}
	}
	return ends, nil
}

// sweepDue reports whether enough messages have ended since the last
// sweep for another. Called with s.mu held.
func (s *Store) sweepDue() bool {
	return s.opts.Fence && s.sinceSweep >= s.sweepAfter && !s.isFenced()
}

// sweepPoint returns where a sweep cuts s.present: the place where the
// keys to purge before it, less bumpRatio for each to write again, are
// most; the revision to purge below; and how many keys before it are
// pending, to write again. cut is 0 when nothing is worth purging.
// Called with s.mu held.
func (s *Store) sweepPoint() (cut int, below uint64, pending int) {
	best, gain, live := 0, 0, 0
	for i, k := range s.present {
		r := s.revs[k.Key]
		switch {
		case r.seq != k.Rev:
			continue // written again since, or forgotten
		case r.live:
			gain -= bumpRatio
			live++
		default:
			gain++
		}
		if gain > best {
			best, cut, pending = gain, i+1, live
		}
	}
	if cut == 0 {
		return 0, 0, 0
	}
	if pending > maxBumps {
		// Cut before the first pending message past maxBumps: later
		// sweeps write the rest again.
		live = 0
		for i, k := range s.present[:cut] {
			if r := s.revs[k.Key]; r.seq == k.Rev && r.live {
				if live == maxBumps {
					cut = i
					break
				}
				live++
			}
		}
		pending = maxBumps
	}
	// Every write at or below s.last is settled, and in the index; those
	// in the air are above it.
	below = s.last + 1
	if cut < len(s.present) {
		below = s.present[cut].Rev
	}
	return cut, below, pending
}

// sweep removes the pending keys of messages ended, and the records of
// ends, in bulk (see the top of this file), once one is due: an Apply
// makes it after its own change. When no message below the cut is
// pending, the common case, the changes of others go on meanwhile: the
// keys purged are ones that no write in the air needs (a message
// accepted again is written at a revision of its own, above them). Else
// it first settles the flights in the air and writes those messages
// again, holding off other changes. A failure is only logged: the keys
// stay until the next sweep, and Load reads them as ended.
func (s *Store) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sweeping {
		return // the next Apply sweeps, if one is still due
	}
	s.sweepWanted.Store(false)
	if !s.sweepDue() {
		return
	}
	s.sinceSweep = 0
	s.sweeping = true
	defer func() { s.sweeping = false }()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()

	cut, below, pending := s.sweepPoint()
	if cut == 0 {
		return
	}
	if pending > 0 {
		s.quiesce() // bump publishes on its own
		if cut, below, _ = s.sweepPoint(); cut == 0 || !s.bump(ctx, s.present[:cut]) {
			return
		}
	}
	swept := slices.Clone(s.present[:cut])
	scans, prev := s.scans, s.swept
	s.mu.Unlock()
	err := s.stillClaimed(ctx)
	if err == nil {
		err = s.purge(ctx, prefixPending, below)
	}
	if err == nil && prev > 1 {
		if perr := s.purge(ctx, prefixEnds, prev); perr != nil {
			s.log.Warn("natsstore: removing the records of messages handled", "bucket", s.opts.Bucket, "err", perr)
		}
	}
	s.mu.Lock()
	if err != nil {
		s.log.Warn("natsstore: removing the keys of messages handled", "bucket", s.opts.Bucket, "err", err)
		return
	}
	s.swept = below
	s.sweeps++
	if s.scans != scans {
		return // the index was read again meanwhile
	}
	for _, k := range swept {
		if r := s.revs[k.Key]; r.seq == k.Rev && !r.live {
			s.forget(k.Key)
		}
		if s.ends[k.Key] == k.Rev {
			delete(s.ends, k.Key)
		}
	}
	// Only appended to since, by writes above below.
	n := copy(s.present, s.present[cut:])
	clear(s.present[n:])
	s.present = s.present[:n]
}

// stillClaimed returns an error if the fence key is no longer this
// store's claim, and then fences the store: a purge is not a write the
// server checks against the fence, so a sweep checks it first. (A claim
// made between the check and the purge deposes a store that purges only
// what is ended in the bucket: see the top of this file.)
func (s *Store) stillClaimed(ctx context.Context) error {
	m, err := s.stream.GetLastMsgForSubject(ctx, s.fenceSubject[0])
	switch {
	case err != nil:
		return err
	case m.Sequence != s.claimed:
		return s.fence(errors.New("another store claimed the bucket"))
	}
	return nil
}

// purge removes from the bucket's stream the messages of the keys that
// start with prefix, below revision below.
func (s *Store) purge(ctx context.Context, prefix string, below uint64) error {
	return s.stream.Purge(ctx, jetstream.WithPurgeSubject(s.prefix+prefix+">"), jetstream.WithPurgeSequence(below))
}

// bump writes again, each to a revision above them all, the messages of
// keys that are still pending, so that a sweep may purge below them. It
// reports whether it wrote them all. Called with s.mu held and no flight
// in the air.
func (s *Store) bump(ctx context.Context, keys []keyRev) bool {
	var ws []write
	for _, k := range keys {
		if r := s.revs[k.Key]; r.live && r.seq == k.Rev {
			m, err := s.stream.GetLastMsgForSubject(ctx, s.prefix+k.Key)
			if err != nil || m.Sequence != k.Rev {
				s.log.Warn("natsstore: reading a pending message to write it again", "bucket", s.opts.Bucket, "key", k.Key, "err", err)
				return false
			}
			ws = append(ws, write{key: k.Key, data: m.Data, cas: true, expect: k.Rev})
		}
	}
	for len(ws) > 0 {
		n := min(len(ws), s.opts.MaxBatch)
		last, err := s.publish(ctx, ws[:n])
		if err != nil {
			s.log.Warn("natsstore: writing pending messages again", "bucket", s.opts.Bucket, "err", err)
			return false
		}
		s.committed(&plan{}, ws[:n], last)
		ws = ws[n:]
	}
	return true
}
