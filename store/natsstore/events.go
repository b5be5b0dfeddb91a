package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"agentsociety/store"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The event log is a stream of its own, Bucket+"_events", on the subject
// "agentsociety.<bucket>.events". Each append is one message (or, past
// eventsBytes, a few), which holds the events as a JSON array and names
// the Seqs of its first and last in the headers hdrFirstEvent and
// hdrLastEvent: the server stores one message per batch the society
// writes behind, not one per event. Each append expects the stream's last
// sequence to be the one this store's last append left, so an append that
// another writer overtook is refused by the server; the Seqs it must
// follow are checked here. A read finds its first message by a binary
// search over the stream, and a trim purges whole messages.
//
// With Options.Fence, the server does not fence the event stream as it
// does the bucket (a write can expect another subject's sequence only in
// its own stream), so the claim fences it in two steps. The claim appends
// a message holding no events, whose first Seq is the one the log expects
// next and whose last is the one before: a deposed store's next append,
// which expects the stream's last sequence to be the one its own last
// append left, is then refused. Every message a fenced store appends
// names its claim in hdrClaim, so that a store which learns the stream
// again after a refused append, and finds another store's claim on its
// last message, knows it is deposed and appends nothing.

// Headers of an event message: the Seqs of its first and last event, and
// with Options.Fence the claim of the store that appended it.
const (
	hdrFirstEvent = "Agentsociety-First-Event"
	hdrLastEvent  = "Agentsociety-Last-Event"
	hdrClaim      = "Agentsociety-Claim"
)

// eventsBytes bounds the events' bytes in one message, well below the
// server's default max_payload of 1 MB. A single event larger than that
// goes alone, and the server refuses it if it is over its limit.
const eventsBytes = 256 << 10

// openEvents binds the event stream, creating it if need be.
func (s *Store) openEvents(ctx context.Context, js jetstream.JetStream) error {
	name := s.opts.Bucket + "_events"
	s.eventSubj = "agentsociety." + s.opts.Bucket + ".events"
	var err error
	s.events, err = js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s.events, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{s.eventSubj}, Storage: s.opts.Storage, Replicas: s.opts.Replicas,
			Description: "agentsociety: the event log of bucket " + s.opts.Bucket,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s.events, err = js.Stream(ctx, name)
		}
	}
	return err
}

// AppendEvents adds events after those kept; see [store.EventLog]. Events
// that do not follow one another, or whose first is not after the last one
// kept, are refused. A failure part way leaves the events of the messages
// before it appended.
func (s *Store) AppendEvents(ctx context.Context, events []store.Event) error {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	if len(events) == 0 {
		return nil
	}
	if s.isFenced() {
		return fmt.Errorf("%w", ErrFenced)
	}
	for i, e := range events[1:] {
		if e.Seq != events[i].Seq+1 {
			return fmt.Errorf("natsstore: appending events: event %d follows event %d", e.Seq, events[i].Seq)
		}
	}
	s.emu.Lock()
	defer s.emu.Unlock()
	if !s.evKnown {
		if err := s.learnEvents(ctx); err != nil {
			return err
		}
		if s.claimedByAnother() {
			s.evKnown = false
			return s.fence(errors.New("another store claimed the event log"))
		}
	}
	if s.evNext != 0 && events[0].Seq < s.evNext {
		return fmt.Errorf("natsstore: appending events: event %d does not come after the last one kept, %d", events[0].Seq, s.evNext-1)
	}
	for len(events) > 0 {
		n, size := 0, 0
		for n < len(events) && (n == 0 || size+len(events[n].Data) < eventsBytes) {
			size += len(events[n].Data) + 1
			n++
		}
		chunk := events[:n]
		events = events[n:]
		m := s.eventMsg(chunk[0].Seq, chunk[n-1].Seq)
		if c := cap(s.evBuf); c < size+2 || c > eventsBytes && c > 4*(size+2) {
			s.evBuf = make([]byte, 0, 2*(size+2))
		}
		m.Data = append(s.evBuf[:0], '[')
		for i, e := range chunk {
			if i > 0 {
				m.Data = append(m.Data, ',')
			}
			m.Data = append(m.Data, e.Data...)
		}
		m.Data = append(m.Data, ']')
		ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(s.evStream))
		// Answered, the message has left the client's buffers; one that
		// failed may still be in them (a reconnect's, say): not reused.
		s.evBuf = nil
		if err == nil {
			s.evBuf = m.Data[:0]
		}
		m.Data = nil
		if err != nil {
			s.evKnown = false
			if s.opts.Fence && overtaken(err) && s.learnEvents(ctx) == nil && s.claimedByAnother() {
				s.evKnown = false
				return s.fence(errors.New("another store claimed the event log"))
			}
			return fmt.Errorf("natsstore: appending events %d to %d: %w", chunk[0].Seq, chunk[n-1].Seq, err)
		}
		s.indexEvents(ack.Sequence, chunk[0].Seq, chunk[n-1].Seq)
		s.evStream, s.evNext = ack.Sequence, chunk[n-1].Seq+1
	}
	return nil
}

// readTrimPoint returns what trimPoint does, reading the stream.
func (s *Store) readTrimPoint(ctx context.Context, first, last, before uint64) (uint64, error) {
	keep, err := s.holding(ctx, first, last, before)
	if err != nil || keep != 0 {
		return keep, err
	}
	// before is past the newest event: keep the message holding it,
	// which a claim's message may follow.
	m, err := s.events.GetMsg(ctx, last)
	if err != nil {
		return 0, fmt.Errorf("natsstore: reading events: %w", err)
	}
	_, newest, err := eventRange(m.Header, m.Sequence)
	if err != nil {
		return 0, err
	}
	return s.holding(ctx, first, last, newest)
}

// An evSpan is a message of the event stream: its sequence, and the Seqs
// of its first and last event (last is first-1 for a claim's message).
type evSpan struct{ seq, first, last uint64 }

// indexEvents adds to s.evIndex the message at seq that this store has
// just appended, holding the events from first to last. The index holds
// the stream's messages without a gap: it starts again at seq if the
// message does not follow its last, and it is bounded, dropping its
// oldest half when full. Called with s.emu held.
func (s *Store) indexEvents(seq, first, last uint64) {
	if n := len(s.evIndex); n > 0 && s.evIndex[n-1].seq != seq-1 {
		s.evIndex = s.evIndex[:0]
	}
	if len(s.evIndex) == maxEvIndex {
		s.evIndex = append(s.evIndex[:0], s.evIndex[maxEvIndex/2:]...)
	}
	s.evIndex = append(s.evIndex, evSpan{seq, first, last})
}

// maxEvIndex bounds the messages s.evIndex holds: a trim finds its place
// there unless the events it keeps are spread over more messages.
const maxEvIndex = 1 << 14

// trimPoint returns, as holding and TrimEvents find it by reading the
// stream, the sequence of the first message to keep when the events
// before before are trimmed from the stream, whose messages run from
// first to last: the first message whose last event is at least before,
// or if there is none the one holding the newest event. ok is false when
// s.evIndex does not tell: it does not end at last, or the place may be
// before the messages it holds. Called with s.emu held.
func (s *Store) trimPoint(first, last, before uint64) (keep uint64, ok bool) {
	idx := s.evIndex
	if !s.evKnown || len(idx) == 0 || idx[len(idx)-1].seq != last || s.evStream != last {
		return 0, false
	}
	// The messages before the index hold events below its first (Seqs
	// only grow): below before if before is not below that.
	if idx[0].seq > first && before < idx[0].first {
		return 0, false
	}
	newest := idx[len(idx)-1].last
	if before > newest {
		before = newest // keep the message holding the newest event
		if idx[0].seq > first && before < idx[0].first {
			return 0, false
		}
	}
	for _, e := range idx {
		if e.seq >= first && e.last >= before {
			return e.seq, true
		}
	}
	return 0, false
}

// eventMsg returns a message to the event stream for the events from
// first to last (none if last is first-1), with its headers.
func (s *Store) eventMsg(first, last uint64) *nats.Msg {
	m := nats.NewMsg(s.eventSubj)
	m.Header.Set(hdrFirstEvent, strconv.FormatUint(first, 10))
	m.Header.Set(hdrLastEvent, strconv.FormatUint(last, 10))
	if s.claimID != "" {
		m.Header.Set(hdrClaim, s.claimID)
	}
	return m
}

// learnEvents reads from the stream the Seq the event log expects next,
// the stream's last sequence, and the claim its last message names.
// Called with s.emu held.
func (s *Store) learnEvents(ctx context.Context) error {
	info, err := s.events.Info(ctx)
	if err != nil {
		return fmt.Errorf("natsstore: %w", err)
	}
	s.evStream, s.evNext, s.evClaim = info.State.LastSeq, 0, ""
	s.evIndex = s.evIndex[:0]
	if info.State.Msgs > 0 {
		m, err := s.events.GetMsg(ctx, info.State.LastSeq)
		if err != nil {
			return fmt.Errorf("natsstore: reading the last events: %w", err)
		}
		_, last, err := eventRange(m.Header, m.Sequence)
		if err != nil {
			return err
		}
		s.evNext, s.evClaim = last+1, m.Header.Get(hdrClaim)
	}
	s.evKnown = true
	return nil
}

// claimedByAnother reports whether, with Options.Fence, the stream's last
// message names another store's claim, as learnEvents read it (a message
// naming none was written before claims were). Called with s.emu held.
func (s *Store) claimedByAnother() bool {
	return s.opts.Fence && s.evClaim != "" && s.evClaim != s.claimID
}

// claimEvents appends the claim's message to the event stream (see the
// comment at the top of this file): no events, its range the place where
// the log's next event goes. It learns the stream first and expects it
// unchanged, and tries again while a deposed store's appends overtake it.
//
// Another store may claim the bucket meanwhile: each try first reads the
// fence key, and finds this store deposed if the key's revision is no
// longer claimed's. That store's own claim then comes after this one's in
// the log, or overtakes it, which makes this try fail and the next one
// read the key again.
func (s *Store) claimEvents(ctx context.Context, claimed uint64) error {
	s.emu.Lock()
	defer s.emu.Unlock()
	for try := 0; ; try++ {
		if err := s.learnEvents(ctx); err != nil {
			return err
		}
		e, err := s.kv.Get(ctx, keyFence)
		if err != nil {
			return fmt.Errorf("reading the fence key: %w", err)
		}
		if e.Revision() != claimed {
			return s.fence(errors.New("another store claimed the bucket"))
		}
		next := max(s.evNext, 1)
		m := s.eventMsg(next, next-1)
		m.Data = []byte("[]")
		ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(s.evStream))
		if overtaken(err) && try < 8 {
			continue
		}
		if err != nil {
			s.evKnown = false
			return fmt.Errorf("claiming the event log: %w", err)
		}
		s.indexEvents(ack.Sequence, next, next-1)
		s.evStream, s.evNext, s.evClaim = ack.Sequence, next, s.claimID
		return nil
	}
}

// overtaken reports whether err is the server's refusal of a write that
// expected the stream's last sequence to be one it no longer is.
func overtaken(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// eventRange returns the Seqs of the first and last event of the message
// at stream sequence seq with headers h; last is first-1 for a claim's
// message, which holds none. A message without them holds one event, whose
// Seq is seq: the log's format before events were packed.
func eventRange(h nats.Header, seq uint64) (first, last uint64, err error) {
	f, l := h.Get(hdrFirstEvent), h.Get(hdrLastEvent)
	if f == "" && l == "" {
		return seq, seq, nil
	}
	first, ferr := strconv.ParseUint(f, 10, 64)
	last, lerr := strconv.ParseUint(l, 10, 64)
	if ferr != nil || lerr != nil || last+1 < first {
		return 0, 0, fmt.Errorf("%w: event message %d names events %q to %q", ErrCorrupt, seq, f, l)
	}
	return first, last, nil
}

// eventsOf returns the events of the message at stream sequence seq.
func eventsOf(h nats.Header, seq uint64, data []byte) ([]store.Event, error) {
	first, last, err := eventRange(h, seq)
	if err != nil {
		return nil, err
	}
	if h.Get(hdrFirstEvent) == "" {
		return []store.Event{{Seq: seq, Data: data}}, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || uint64(len(raw)) != last-first+1 {
		return nil, fmt.Errorf("%w: event message %d does not hold events %d to %d", ErrCorrupt, seq, first, last)
	}
	out := make([]store.Event, len(raw))
	for i, d := range raw {
		out[i] = store.Event{Seq: first + uint64(i), Data: d}
	}
	return out, nil
}

// holding returns the stream sequence of the first message kept whose
// last event's Seq is at least seq, or 0 if there is none, by a binary
// search over the stream's messages from first to last. A message
// trimmed meanwhile counts as below seq.
func (s *Store) holding(ctx context.Context, first, last, seq uint64) (uint64, error) {
	lo, hi := first, last+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := s.events.GetMsg(ctx, mid)
		below := errors.Is(err, jetstream.ErrMsgNotFound)
		if err != nil && !below {
			return 0, fmt.Errorf("natsstore: reading events: %w", err)
		}
		if !below {
			_, l, err := eventRange(m.Header, m.Sequence)
			if err != nil {
				return 0, err
			}
			below = l < seq
		}
		if below {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo > last {
		return 0, nil
	}
	return lo, nil
}

// ReadEvents returns up to limit events from the first kept whose Seq is
// at least from; see [store.EventLog].
func (s *Store) ReadEvents(ctx context.Context, from uint64, limit int) ([]store.Event, error) {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()

	info, err := s.events.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("natsstore: %w", err)
	}
	st := info.State
	if limit <= 0 || st.Msgs == 0 {
		return nil, nil
	}
	start, err := s.holding(ctx, st.FirstSeq, st.LastSeq, from)
	if err != nil || start == 0 {
		return nil, err
	}
	// Message by message: each holds a batch of events, so a read takes
	// few, and each is bounded by ctx.
	var out []store.Event
	for seq := start; seq <= st.LastSeq && len(out) < limit; seq++ {
		m, err := s.events.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			// Trimmed meanwhile: go on from the first kept.
			info, err := s.events.Info(ctx)
			if err != nil {
				return nil, fmt.Errorf("natsstore: %w", err)
			}
			seq = max(seq, info.State.FirstSeq-1)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("natsstore: reading events: %w", err)
		}
		evs, err := eventsOf(m.Header, seq, m.Data)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Seq >= from && len(out) < limit {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// TrimEvents removes the events whose Seq is below before, in whole
// messages, never the newest; see [store.EventLog].
func (s *Store) TrimEvents(ctx context.Context, before uint64) error {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	if s.isFenced() {
		return fmt.Errorf("%w", ErrFenced) // the log is another store's now
	}
	info, err := s.events.Info(ctx)
	if err != nil {
		return fmt.Errorf("natsstore: %w", err)
	}
	st := info.State
	if st.Msgs == 0 {
		return nil
	}
	s.emu.Lock()
	keep, known := s.trimPoint(st.FirstSeq, st.LastSeq, before)
	s.emu.Unlock()
	if !known {
		if keep, err = s.readTrimPoint(ctx, st.FirstSeq, st.LastSeq, before); err != nil {
			return err
		}
	}
	if keep > st.FirstSeq {
		if err := s.events.Purge(ctx, jetstream.WithPurgeSequence(keep)); err != nil {
			return fmt.Errorf("natsstore: trimming events: %w", err)
		}
		s.emu.Lock()
		i := 0
		for i < len(s.evIndex) && s.evIndex[i].seq < keep {
			i++
		}
		s.evIndex = append(s.evIndex[:0], s.evIndex[i:]...)
		s.emu.Unlock()
	}
	return nil
}

// EventBounds returns the Seqs of the oldest and newest events kept; see
// [store.EventLog].
func (s *Store) EventBounds(ctx context.Context) (first, last uint64, err error) {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer done()
	info, err := s.events.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("natsstore: %w", err)
	}
	st := info.State
	if st.Msgs == 0 {
		return 0, 0, nil
	}
	// The first message kept, then the last, which a trim never removes.
	for try := 0; ; try++ {
		m, err := s.events.GetMsg(ctx, st.FirstSeq)
		if errors.Is(err, jetstream.ErrMsgNotFound) && try < 3 {
			// Trimmed meanwhile: read the stream's state again.
			if info, err = s.events.Info(ctx); err != nil {
				return 0, 0, fmt.Errorf("natsstore: %w", err)
			}
			st = info.State
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("natsstore: reading events: %w", err)
		}
		var last uint64
		if first, last, err = eventRange(m.Header, m.Sequence); err != nil {
			return 0, 0, err
		}
		if last < first {
			// A claim's message, holding no events: the oldest event is
			// the first of the first message after it that holds any,
			// which may come after a gap.
			seq, err := s.holding(ctx, m.Sequence, st.LastSeq, first)
			if err != nil || seq == 0 {
				return 0, 0, err // no events: only claims' messages
			}
			if m, err = s.events.GetMsg(ctx, seq); err != nil {
				return 0, 0, fmt.Errorf("natsstore: reading events: %w", err)
			}
			if first, _, err = eventRange(m.Header, m.Sequence); err != nil {
				return 0, 0, err
			}
		}
		break
	}
	m, err := s.events.GetMsg(ctx, st.LastSeq)
	if err != nil {
		return 0, 0, fmt.Errorf("natsstore: reading events: %w", err)
	}
	if _, last, err = eventRange(m.Header, m.Sequence); err != nil || last < first {
		return 0, 0, err // no events: only claims' messages
	}
	return first, last, nil
}

var _ store.EventLog = (*Store)(nil)
