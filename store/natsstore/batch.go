package natsstore

import (
	"bytes"
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
// one this store's claim wrote (see the top of commit.go).
func (s *Store) messages(ws []write, expectLast, fenceCheck bool, last uint64) []*nats.Msg {
	id := ""
	if len(ws) > 1 {
		id = newID()
	}
	ms := make([]*nats.Msg, len(ws))
	for i := range ws {
		ms[i] = &nats.Msg{Header: make(nats.Header, 4)}
		s.message(ms[i], ws, i, id, expectLast, fenceCheck, last)
	}
	return ms
}

// message makes m the message of ws[i], of a batch id if ws has several
// writes (see messages). m's Header is cleared and filled; its values
// that vary are strings of their own, and the others shared.
func (s *Store) message(m *nats.Msg, ws []write, i int, id string, expectLast, fenceCheck bool, last uint64) {
	w := &ws[i]
	m.Subject, m.Reply, m.Data = s.prefix+w.key, "", w.data
	clear(m.Header)
	if id != "" {
		m.Header[hdrBatchID] = []string{id}
		m.Header[hdrBatchSeq] = []string{strconv.Itoa(i + 1)}
		if i == len(ws)-1 {
			m.Header[hdrBatchCommit] = hdrOne
		}
	}
	if w.del {
		m.Header[hdrKVOperation] = hdrDel
		m.Header[jetstream.MsgTTLHeader] = s.ttlHeader
	}
	if i == 0 && fenceCheck {
		m.Header[jetstream.ExpectedLastSubjSeqHeader] = s.claimedHeader
		m.Header[hdrExpectedSubject] = s.fenceSubject
	} else if w.cas {
		m.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(w.expect, 10)}
	}
	if expectLast && i == 0 {
		m.Header[jetstream.ExpectedLastSeqHeader] = []string{strconv.FormatUint(last, 10)}
	}
}

// Header values shared by every message that has them; never modified.
var (
	hdrOne = []string{"1"}
	hdrDel = []string{"DEL"}
)

// readAck reads the server's answer to a write of n messages: the
// sequence of the last, or the *rejection that refused them all.
func readAck(data []byte, n int) (uint64, error) {
	if n == 1 {
		if seq, ok := quickAck(data); ok {
			return seq, nil
		}
	}
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

// quickAck reads the sequence from the answer to a plain message that was
// stored, {"stream":"<name>","seq":<n>} or with "domain" between, without
// the cost of json.Unmarshal: most changes are one message. ok is false
// for any other answer, which readAck reads in full.
func quickAck(data []byte) (seq uint64, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"stream":"`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return 0, false
	}
	rest = rest[end+1:]
	if r, ok := bytes.CutPrefix(rest, []byte(`,"domain":"`)); ok {
		if end = bytes.IndexByte(r, '"'); end < 0 {
			return 0, false
		}
		rest = r[end+1:]
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"seq":`)); !ok {
		return 0, false
	}
	if rest, ok = bytes.CutSuffix(rest, []byte("}")); !ok || len(rest) == 0 {
		return 0, false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0, false // more fields, as "duplicate"
		}
	}
	seq, err := strconv.ParseUint(string(rest), 10, 64)
	return seq, err == nil
}
