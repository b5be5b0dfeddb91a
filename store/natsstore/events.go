package natsstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"agentsociety/store"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The event log is a stream of its own, Bucket+"_events", one message per
// event on the subject "agentsociety.<bucket>.events", whose stream
// sequence is the event's Seq: appends expect the stream's last sequence
// to be the Seq before theirs, so an event out of order is refused, and a
// read starts at a Seq by starting a consumer there.

// eventsChunk is how many events AppendEvents publishes before it waits
// for their acknowledgements.
const eventsChunk = 500

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

// AppendEvents adds events after those kept; see [store.EventLog]. Each
// is refused by the server unless it directly follows the last one kept.
// A failure part way leaves the events before it appended.
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

	// A log that starts past 1 (or after a gap nobody kept) starts its
	// stream there, so that sequences stay Seqs.
	info, err := s.events.Info(ctx)
	if err != nil {
		return fmt.Errorf("natsstore: %w", err)
	}
	if st := info.State; st.Msgs == 0 && st.LastSeq+1 < events[0].Seq {
		if err := s.events.Purge(ctx, jetstream.WithPurgeSequence(events[0].Seq)); err != nil {
			return fmt.Errorf("natsstore: starting the event log at %d: %w", events[0].Seq, err)
		}
	}
	for len(events) > 0 {
		chunk := events[:min(len(events), eventsChunk)]
		events = events[len(chunk):]
		acks := make([]jetstream.PubAckFuture, 0, len(chunk))
		for _, e := range chunk {
			m := &nats.Msg{Subject: s.eventSubj, Data: e.Data}
			f, err := s.js.PublishMsgAsync(m, jetstream.WithExpectLastSequence(e.Seq-1))
			if err != nil {
				return fmt.Errorf("natsstore: appending event %d: %w", e.Seq, err)
			}
			acks = append(acks, f)
		}
		for i, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("natsstore: appending event %d: %w", chunk[i].Seq, err)
			case <-ctx.Done():
				return fmt.Errorf("natsstore: appending event %d: %w", chunk[i].Seq, ctx.Err())
			}
		}
	}
	return nil
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
	start := max(from, st.FirstSeq, 1)
	if limit <= 0 || st.Msgs == 0 || start > st.LastSeq {
		return nil, nil
	}
	end := min(st.LastSeq, start+uint64(limit)-1)
	c, err := s.events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start,
	})
	if err != nil {
		return nil, fmt.Errorf("natsstore: reading events: %w", err)
	}
	var out []store.Event
	for {
		want := int(end+1-start) - len(out)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// The events up to end are there unless a trim raced this read;
		// then the wait is short and the read returns what it found.
		batch, err := c.Fetch(want, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("natsstore: reading events: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("natsstore: reading events: %w", err)
			}
			if seq := meta.Sequence.Stream; seq <= end {
				out = append(out, store.Event{Seq: seq, Data: m.Data()})
				if seq == end {
					return out, nil
				}
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("natsstore: reading events: %w", err)
		}
		if got == 0 { // trimmed meanwhile, up to end
			return out, nil
		}
	}
}

// TrimEvents removes the events whose Seq is below before, never the
// newest; see [store.EventLog].
func (s *Store) TrimEvents(ctx context.Context, before uint64) error {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	info, err := s.events.Info(ctx)
	if err != nil {
		return fmt.Errorf("natsstore: %w", err)
	}
	st := info.State
	if seq := min(before, st.LastSeq); st.Msgs > 0 && seq > st.FirstSeq {
		if err := s.events.Purge(ctx, jetstream.WithPurgeSequence(seq)); err != nil {
			return fmt.Errorf("natsstore: trimming events: %w", err)
		}
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
	if info.State.Msgs == 0 {
		return 0, 0, nil
	}
	return info.State.FirstSeq, info.State.LastSeq, nil
}

var _ store.EventLog = (*Store)(nil)
