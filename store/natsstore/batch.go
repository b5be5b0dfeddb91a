package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of JetStream's atomic batch publish (ADR-50, nats-server 2.12 and
// later), which nats.go v1.55.0 has no API for.
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
	hdrKVOperation = "KV-Operation"
	// hdrExpectedSubject names the subject whose last sequence a message's
	// Nats-Expected-Last-Subject-Sequence is about, when it is not the
	// message's own (nats-server 2.11 and later).
	hdrExpectedSubject = "Nats-Expected-Last-Subject-Sequence-Subject"
)

// rejection is an error the server answered a batch's commit with: the
// batch was not stored.
type rejection struct {
	Code        int                 `json:"code"`
	ErrCode     jetstream.ErrorCode `json:"err_code"`
	Description string              `json:"description"`
}

func (r *rejection) Error() string {
	return fmt.Sprintf("natsstore: the server refused the change: %s (error %d)", r.Description, r.ErrCode)
}

// conflict reports whether the batch was refused because a key's revision
// was not the one expected.
func (r *rejection) conflict() bool {
	return r.ErrCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		r.ErrCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// publish writes ws as one atomic batch on the bucket's stream and returns
// the revision of the last. The server stores every message of the batch
// or none: it checks each expected revision when the commit arrives, with
// no other write to the stream in between. One write goes as a plain
// message, which is as atomic and costs the server less: for a stream on
// one file-stored replica it stages every batch in files of its own. An
// error of type *rejection means nothing was stored; any other error
// leaves the outcome unknown.
//
// With Options.Fence, the batch expects the stream's last sequence to be
// s.last, and a write refused for another store's or of unknown outcome
// fences s (see Options.Fence). Called with s.mu held.
func (s *Store) publish(ctx context.Context, ws []write) (uint64, error) {
	if !s.opts.Fence || len(ws) == 0 {
		return s.send(ctx, ws, false)
	}
	if s.isFenced() {
		return 0, fmt.Errorf("%w", ErrFenced)
	}
	if err := ctx.Err(); err != nil {
		return 0, err // nothing sent: no doubt to fence for
	}
	seq, err := s.send(ctx, ws, true)
	var rej *rejection
	switch {
	case err == nil:
		s.last = seq
		return seq, nil
	case errors.As(err, &rej) && rej.conflict():
		// Either a key's revision or the stream's last sequence was not
		// the one expected: only another store moves the latter.
		info, ierr := s.stream.Info(ctx)
		if ierr != nil {
			return 0, s.fence(fmt.Errorf("reading the stream after a refused write: %w", ierr))
		}
		if info.State.LastSeq != s.last {
			return 0, s.fence(err)
		}
		return 0, err
	case errors.As(err, &rej):
		return 0, err
	default:
		return 0, s.fence(err)
	}
}

// send publishes ws (see publish), the first expecting the stream's last
// sequence to be s.last if expectLast is set, and waits for the answer.
func (s *Store) send(ctx context.Context, ws []write, expectLast bool) (uint64, error) {
	if len(ws) == 0 {
		return 0, nil
	}
	ms := s.messages(ws, expectLast, false, s.last)
	for _, m := range ms[:len(ms)-1] {
		// Staged by the server; a message it refuses abandons the batch,
		// and the commit reports it.
		if err := s.nc.PublishMsg(m); err != nil {
			return 0, fmt.Errorf("natsstore: publishing a change: %w", err)
		}
	}
	resp, err := s.nc.RequestMsgWithContext(ctx, ms[len(ms)-1])
	if err != nil {
		return 0, fmt.Errorf("natsstore: committing a change: %w", err)
	}
	return readAck(resp.Data, len(ws))
}

// messages returns the messages that write ws: one plain message, or an
// atomic batch whose last message commits it. With expectLast, the first
// expects the stream's last sequence to be last. With fenceCheck, the
// first expects, instead of its key's revision, the fence key's to be the
// one this store's claim wrote (see pipeline).
func (s *Store) messages(ws []write, expectLast, fenceCheck bool, last uint64) []*nats.Msg {
	id := ""
	if len(ws) > 1 {
		id = newID()
	}
	ms := make([]*nats.Msg, len(ws))
	for i, w := range ws {
		m := nats.NewMsg(s.prefix + w.key)
		m.Data = w.data
		if id != "" {
			m.Header.Set(hdrBatchID, id)
			m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
			if i == len(ws)-1 {
				m.Header.Set(hdrBatchCommit, "1")
			}
		}
		if w.del {
			m.Header.Set(hdrKVOperation, "DEL")
			m.Header.Set(jetstream.MsgTTLHeader, s.ttl)
		}
		if w.cas {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(w.expect, 10))
		}
		if expectLast && i == 0 {
			m.Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(last, 10))
		}
		if fenceCheck && i == 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(s.claimed, 10))
			m.Header.Set(hdrExpectedSubject, s.prefix+keyFence)
		}
		ms[i] = m
	}
	return ms
}

// readAck reads the server's answer to a write of n messages: the
// sequence of the last, or the *rejection that refused them all.
func readAck(data []byte, n int) (uint64, error) {
	var ack struct {
		Error *rejection `json:"error"`
		Seq   uint64     `json:"seq"`
		Count int        `json:"count"`
	}
	if err := json.Unmarshal(data, &ack); err != nil {
		return 0, fmt.Errorf("natsstore: reading the commit's answer %q: %w", data, err)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	if n > 1 && ack.Count != n {
		return 0, fmt.Errorf("natsstore: the server committed %d messages of a batch of %d", ack.Count, n)
	}
	return ack.Seq, nil
}
