package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"agentsociety/store"

	"github.com/nats-io/nats.go/jetstream"
)

// Removals beyond one batch. A change with a removal that needs more
// writes than one atomic batch takes (Options.MaxBatch) is written through
// a journal: its first batch holds the change's writes of values and the
// journal, which names each record the change deletes with the revision
// removed (those its removal names, and any other, such as the state
// entries of the agents it removes: a society forgets those in the change
// that removes the agents), and the messages of the histories removed.
// Once that batch is stored the change is recorded: Load lists no record
// at a revision a journal names (a record written again since has
// another), and the records removed are deleted by the batches that
// follow, each deletion expecting the revision removed, as any; then the
// journal is deleted. A store that stopped before (the process died, the
// connection dropped) leaves the journal, which the next Load finds and
// finishes. So a removal of any size is atomic, and costs what it removes
// (a journal part, one message of up to half the server's max_payload,
// names several thousand records).
//
// Such a change's first batch is written on its own, once the changes
// sent before it have settled (see gather). The batches that follow are
// written by its Apply, which returns once they are (cleanupLater): one
// at a time, each once the flights in the air have settled, as a write on
// its own is, so that with Options.Fence each expects the stream's last
// sequence that the writes before it left. Other changes go out in
// between: the removal is recorded already, and the index says what each
// deletion may take, as for any write.
//
// The journal names the records this store knows the removal to take. A
// record another store wrote since this one last read it (which a batch
// of one change would have found, its revision not the one expected) is
// not removed: the journal names another revision.

// prefixJournal starts the keys of the parts of a journal: rm.<id>.<n>.
const prefixJournal = "rm."

func journalKey(id string, part int) string {
	return prefixJournal + id + "." + strconv.Itoa(part)
}

// journalRec is one part of a journal.
type journalRec struct {
	Records   []keyRev    `json:"records,omitempty"`
	Histories []histRange `json:"histories,omitempty"`
}

// keyRev names a record removed: its key, and the revision of the value
// removed.
type keyRev struct {
	Key string `json:"key"`
	Rev uint64 `json:"rev"`
}

// histRange names the messages [Lo, Hi) of a history removed.
type histRange struct {
	AgentID string `json:"agentId"`
	Lo      uint64 `json:"lo"`
	Hi      uint64 `json:"hi"`
}

// A journal is a removal recorded whose records the bucket still holds.
type journal struct {
	id        string
	parts     []string // its keys
	records   []keyRev
	histories []histRange
	// What the deletions of its records have reached (see step): the
	// records before rec, the histories before hist, and the messages of
	// histories[hist] before msg, if above its Lo.
	rec, hist int
	msg       uint64
}

// needsJournal reports whether c, planned as p, is written through a
// journal: it has a removal, and needs more writes than one batch takes.
func (s *Store) needsJournal(c *store.Change, p *plan) bool {
	return len(p.writes) > s.opts.MaxBatch && !c.Remove.Empty()
}

// journalOf returns the journal of p, a change with a removal, and the
// writes of its first batch: the change's writes of values, and the
// journal's parts. The journal names every record the change deletes,
// whether its removal names it or not. rest is the deletions of the
// messages the change's histories dropped, to make after it. It refuses
// the change if that batch is over Options.MaxBatch or a part over what
// the server takes in one message.
func (s *Store) journalOf(p *plan) (j *journal, ws, rest []write, err error) {
	j = &journal{id: newID(), histories: p.retired}
	for _, w := range p.writes {
		if w.del {
			j.records = append(j.records, keyRev{w.key, w.expect})
		} else {
			ws = append(ws, w)
		}
	}
	for _, w := range p.garbage {
		if !w.removal {
			rest = append(rest, w)
		}
	}
	limit := s.nc.MaxPayload() - writeHeaders
	for i, rec := range j.split(int(limit / 2)) {
		data, err := json.Marshal(rec)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("natsstore: encoding a removal's journal: %w", err)
		}
		key := journalKey(j.id, i)
		j.parts = append(j.parts, key)
		ws = append(ws, write{key: key, data: data, cas: true})
	}
	if len(ws) > s.opts.MaxBatch {
		return nil, nil, nil, fmt.Errorf("natsstore: the change needs %d writes besides its deletions, over the limit of %d for one atomic batch", len(ws), s.opts.MaxBatch)
	}
	for _, w := range ws {
		if int64(len(w.data)) > limit {
			return nil, nil, nil, fmt.Errorf("natsstore: a record of %d bytes is over the %d the server takes in one message (its max_payload, less %d for headers)", len(w.data), limit, writeHeaders)
		}
	}
	return j, ws, rest, nil
}

// split returns j's parts, each of about size bytes of JSON at most.
func (j *journal) split(size int) []journalRec {
	var parts []journalRec
	var cur journalRec
	n := 0
	add := func(m int) {
		if n+m > size && n > 0 {
			parts = append(parts, cur)
			cur, n = journalRec{}, 0
		}
		n += m
	}
	for _, r := range j.records {
		add(len(r.Key) + 40) // a key is base64url: nothing to escape
		cur.Records = append(cur.Records, r)
	}
	for _, h := range j.histories {
		add(6*len(h.AgentID) + 64) // each byte escaped, at worst
		cur.Histories = append(cur.Histories, h)
	}
	return append(parts, cur)
}

// journaled records in the index that j, written, removed its records:
// they are no longer live, though the bucket holds them until cleanup
// deletes them. Called with s.mu held.
func (s *Store) journaled(j *journal) {
	for _, r := range j.records {
		s.setRev(r.Key, rev{seq: r.Rev})
		s.hidden[r.Key] = r.Rev
	}
	s.journals = append(s.journals, j)
}

// cleanup deletes what j removed, then j, logging a failure: j is then
// left for the next Load. Called with s.mu held and no flight in the air.
func (s *Store) cleanup(ctx context.Context, j *journal) {
	for !s.testStopAfterJournal {
		done, err := s.step(ctx, j)
		if err != nil {
			s.cleanupFailed(j, err)
			return
		}
		if done {
			return
		}
	}
}

// cleanupLater deletes what j, which this store wrote, removed, as
// cleanup does, one batch at a time: it takes s.mu for each batch, once
// the flights in the air have settled, and releases it in between, so
// that the changes applied meanwhile do not wait for a removal of any
// size. The index says what the bucket holds, as for any write: a record
// that a change written in between wrote again is not deleted, and the
// journal's parts go last. It stops once j is gone from the store's
// journals (a Load finished it; the journals it finds after reading the
// bucket again are the bucket's, j's by its id). Called without s.mu by
// the Apply whose change wrote j.
func (s *Store) cleanupLater(ctx context.Context, j *journal) {
	for {
		s.mu.Lock()
		s.quiesce()
		j = s.journalByID(j.id)
		if j == nil || s.testStopAfterJournal {
			s.mu.Unlock()
			return
		}
		done, err := s.step(ctx, j)
		if err != nil {
			s.cleanupFailed(j, err)
		}
		between := s.testBetweenBatches
		s.mu.Unlock()
		if done || err != nil {
			return
		}
		if between != nil {
			between()
		}
	}
}

// cleanupFailed logs that the deletion of what j removed failed: the
// bucket keeps them, and j, until the store loads it again.
func (s *Store) cleanupFailed(j *journal, err error) {
	s.log.Warn("natsstore: deleting the records of a removal recorded; the bucket keeps them until the store loads it again", "bucket", s.opts.Bucket, "records", len(j.records), "err", err)
}

// journalByID returns the journal of the store's with the given id, or
// nil if it has none. Called with s.mu held.
func (s *Store) journalByID(id string) *journal {
	for _, j := range s.journals {
		if j.id == id {
			return j
		}
	}
	return nil
}

// step writes the next batch of the deletions of what j removed: the
// records the bucket still holds at the revision removed, then, in the
// batches after those, the messages of its histories that no live head
// covers, and then, in the batch that deletes the last of those or one
// after it, j's parts. It reports whether j is done,
// its parts deleted and j dropped from the store's journals. Called with
// s.mu held and no flight in the air.
func (s *Store) step(ctx context.Context, j *journal) (done bool, err error) {
	var ws []write
	rec, hist, msg := j.rec, j.hist, j.msg
	for ; rec < len(j.records) && len(ws) < s.opts.MaxBatch; rec++ {
		r := j.records[rec]
		if rv := s.revs[r.Key]; rv.seq == r.Rev && !rv.live {
			w := write{key: r.Key, del: true, cas: true, expect: r.Rev}
			if t, ok := strings.CutPrefix(r.Key, prefixHead); ok {
				w.headOf, _ = untok(t) // for refresh
			}
			ws = append(ws, w)
		}
	}
	// The messages only once every record's deletion is done: a head
	// that another store wrote again meanwhile (its deletion refused) is
	// then in the index, and the messages it still covers are left.
	for ; j.rec == len(j.records) && hist < len(j.histories) && len(ws) < s.opts.MaxBatch; hist, msg = hist+1, 0 {
		h := j.histories[hist]
		hd, live := s.heads[h.AgentID]
		for msg = max(msg, h.Lo); msg < h.Hi && len(ws) < s.opts.MaxBatch; msg++ {
			if live && msg >= hd.Lo && msg < hd.Hi {
				continue
			}
			ws = append(ws, write{key: histMsgKey(h.AgentID, msg), del: true})
		}
		if msg < h.Hi {
			break
		}
	}
	last := rec == len(j.records) && hist == len(j.histories)
	if last {
		var parts []write
		for _, key := range j.parts {
			if rv := s.revs[key]; rv.live {
				parts = append(parts, write{key: key, del: true, cas: true, expect: rv.seq})
			}
		}
		if len(ws) == 0 || len(ws)+len(parts) <= s.opts.MaxBatch {
			ws = append(ws, parts...)
		} else {
			last = false // in a batch of their own, next
		}
	}
	if err := s.deleteAll(ctx, ws); err != nil {
		return false, err
	}
	j.rec, j.hist, j.msg = rec, hist, msg
	if !last {
		return false, nil
	}
	s.journals = slices.DeleteFunc(s.journals, func(o *journal) bool { return o == j })
	for _, r := range j.records {
		if s.hidden[r.Key] == r.Rev {
			delete(s.hidden, r.Key)
		}
	}
	return true, nil
}

// deleteAll writes the deletions ws in batches of Options.MaxBatch. A
// batch refused because a key is not at the revision expected (another
// store wrote it, or its deletion) is tried again with the keys learnt
// again, less those no longer at it.
func (s *Store) deleteAll(ctx context.Context, ws []write) error {
	for try := 0; len(ws) > 0; {
		n := min(len(ws), s.opts.MaxBatch)
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
		last, err := s.publish(bctx, ws[:n])
		var rej *rejection
		switch {
		case err == nil:
			s.committed(&plan{}, ws[:n], last)
			ws = ws[n:]
		case errors.As(err, &rej) && rej.conflict() && try < conflictRetries:
			try++
			err = s.refresh(bctx, ws[:n])
			kept := ws[:0]
			for i, w := range ws {
				if i >= n || !w.cas || s.revs[w.key].seq == w.expect {
					kept = append(kept, w)
				}
			}
			ws = kept
		case errors.As(err, &rej):
		default:
			if !s.opts.Fence {
				s.indexed = false // the next change reads the bucket again
			}
		}
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// readJournals returns the journals that entries hold, and the records
// they remove, by key: the revision removed.
func readJournals(entries map[string]jetstream.KeyValueEntry) ([]*journal, map[string]uint64, error) {
	byID := make(map[string]*journal)
	var ids []string
	hidden := make(map[string]uint64)
	for key, e := range entries {
		if !strings.HasPrefix(key, prefixJournal) || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		id := key[len(prefixJournal):]
		if i := strings.LastIndexByte(id, '.'); i >= 0 {
			id = id[:i]
		}
		var rec journalRec
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return nil, nil, fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
		}
		j := byID[id]
		if j == nil {
			j = &journal{id: id}
			byID[id] = j
			ids = append(ids, id)
		}
		j.parts = append(j.parts, key)
		j.records = append(j.records, rec.Records...)
		j.histories = append(j.histories, rec.Histories...)
		for _, r := range rec.Records {
			// A record removed, written again and removed again is
			// named by two journals: the bucket holds the later.
			hidden[r.Key] = max(hidden[r.Key], r.Rev)
		}
	}
	slices.Sort(ids)
	js := make([]*journal, len(ids))
	for i, id := range ids {
		js[i] = byID[id]
	}
	return js, hidden, nil
}
