package agentsociety

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"agentsociety/llm"
)

// TestAppendEventIsMarshal: for any event, appendEvent writes what
// json.Marshal writes, byte for byte when the event's raw JSON (payload,
// arguments) is compact as json.Marshal makes it, and the same value
// otherwise; and it refuses exactly the events json.Marshal refuses, of
// those whose message, if any, carries JSON.
func TestAppendEventIsMarshal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		compact := rapid.Bool().Draw(t, "compact raw JSON")
		e := Event{
			Seq:      rapid.Uint64().Draw(t, "seq"),
			Time:     drawTime(t, "time"),
			Kind:     EventKind(drawString(t, "kind")),
			Task:     drawString(t, "task"),
			Agent:    drawString(t, "agent"),
			Turn:     drawString(t, "turn"),
			Target:   drawString(t, "target"),
			Role:     drawString(t, "role"),
			Name:     drawString(t, "name"),
			Trace:    drawString(t, "trace"),
			Request:  drawString(t, "request"),
			Artifact: drawString(t, "artifact"),
			Status:   drawString(t, "status"),
			Code:     Code(drawString(t, "code")),
			Detail:   drawString(t, "detail"),
			Args:     drawRaw(t, "args", compact),
			Attempt:  rapid.IntRange(-3, 1<<40).Draw(t, "attempt") * rapid.IntRange(0, 1).Draw(t, "attempt set"),
			Count:    rapid.Int().Draw(t, "count") * rapid.IntRange(0, 1).Draw(t, "count set"),
			Duration: time.Duration(rapid.Int64().Draw(t, "duration") * rapid.Int64Range(0, 1).Draw(t, "duration set")),
		}
		if rapid.Bool().Draw(t, "message") {
			payload := drawRaw(t, "payload", compact)
			if len(payload) > 0 && !json.Valid(payload) {
				payload = json.RawMessage(`{}`) // a message's payload is JSON: the bus and restore see to it
			}
			e.Message = &Message{
				ID: drawString(t, "message id"), Seq: rapid.Uint64().Draw(t, "message seq"),
				From: drawString(t, "from"), To: drawString(t, "to"), TaskID: drawString(t, "message task"),
				Type: MessageType(drawString(t, "type")), Payload: payload,
				SentAt: drawTime(t, "sent at"),
			}
		}
		if rapid.Bool().Draw(t, "usage") {
			e.Usage = &llm.Usage{InputTokens: rapid.Int().Draw(t, "in"), OutputTokens: rapid.Int().Draw(t, "out")}
		}

		want, err := json.Marshal(&e)
		got, ok := appendEvent([]byte("prefix"), &e)
		if !bytes.HasPrefix(got, []byte("prefix")) {
			t.Fatalf("appendEvent did not append: %q", got)
		}
		got = got[len("prefix"):]
		if ok != (err == nil) {
			t.Fatalf("appendEvent ok = %v, json.Marshal error %v", ok, err)
		}
		if !ok {
			if len(got) != 0 {
				t.Fatalf("appendEvent refused the event and appended %q", got)
			}
			return
		}
		if compact {
			if !bytes.Equal(got, want) {
				t.Fatalf("appendEvent wrote\n%s\njson.Marshal\n%s", got, want)
			}
			return
		}
		if diff := cmp.Diff(decodeAny(t, want), decodeAny(t, got)); diff != "" {
			t.Fatalf("appendEvent wrote\n%s\nnot the value json.Marshal wrote\n%s\n(-marshal +appendEvent)\n%s", got, want, diff)
		}
	})
}

// TestAppendEventTimes: appendEvent writes the times json.Marshal writes
// and refuses those it refuses, at the edges of what RFC 3339 can write.
func TestAppendEventTimes(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(-1, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 23*3600+59*60)),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -24*3600)),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 5*3600+30*60+15)),
		{},
	} {
		for _, e := range []Event{{Time: tm}, {Message: &Message{SentAt: tm}}} {
			want, err := json.Marshal(&e)
			got, ok := appendEvent(nil, &e)
			if ok != (err == nil) || ok && !bytes.Equal(got, want) {
				t.Errorf("%v: appendEvent wrote %s (ok %v), json.Marshal %s (%v)", tm, got, ok, want, err)
			}
		}
	}
}

// drawString draws a string, empty a third of the time, made of what JSON
// escapes and what it does not, or of any bytes, valid UTF-8 or not.
func drawString(t *rapid.T, label string) string {
	switch rapid.IntRange(0, 5).Draw(t, label+" kind") {
	case 0, 1:
		return ""
	case 2:
		return string(rapid.SliceOf(rapid.Byte()).Draw(t, label))
	default:
		r := rapid.OneOf(rapid.RuneFrom([]rune{'"', '\\', '<', '>', '&', '\b', '\f', '\n', '\r', '\t', 0, 0x1f, 0x7f, '\u2028', '\u2029', 'é', '界', '😀', 0xfffd}), rapid.Rune(), rapid.RuneFrom(nil, unicode.ASCII_Hex_Digit, unicode.Latin))
		return rapid.StringOf(r).Draw(t, label)
	}
}

// drawTime draws a time in UTC, in a fixed zone, or in Local, with or
// without a monotonic reading, its year now and then out of what JSON
// can write.
func drawTime(t *rapid.T, label string) time.Time {
	sec := rapid.Int64Range(-70_000_000_000, 260_000_000_000).Draw(t, label+" seconds")
	tm := time.Unix(sec, rapid.Int64Range(0, 999_999_999).Draw(t, label+" nanoseconds"))
	switch rapid.IntRange(0, 3).Draw(t, label+" zone") {
	case 0:
		tm = tm.UTC()
	case 1:
		// Offsets of 24 hours or more RFC 3339 cannot write.
		tm = tm.In(time.FixedZone("z", rapid.IntRange(-26*3600, 26*3600).Draw(t, label+" offset")))
	case 2:
		tm = time.Now().Add(time.Duration(rapid.Int64Range(-1e15, 1e15).Draw(t, label+" from now")))
	}
	return tm
}

// drawRaw draws raw JSON: nil, a value json.Marshal wrote (compact), the
// same indented (when compact is false), or, now and then, not JSON.
func drawRaw(t *rapid.T, label string, compact bool) json.RawMessage {
	switch rapid.IntRange(0, 5).Draw(t, label+" kind") {
	case 0, 1:
		return nil
	case 2:
		return json.RawMessage(rapid.SampledFrom([]string{"{", "nope", `{"a":}`, "{} {}", "\"\xff\""}).Draw(t, label))
	}
	v := map[string]any{drawString(t, label+" key"): drawString(t, label+" value"), "n": rapid.Float64().Draw(t, label+" number"), "list": []any{true, nil, drawString(t, label+" item")}}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`) // a NaN or an infinity
	}
	if !compact {
		var out bytes.Buffer
		if err := json.Indent(&out, b, " ", "\t"); err != nil {
			t.Fatal(err)
		}
		b = append(append([]byte(" \n"), out.Bytes()...), '\n')
	}
	return b
}

// decodeAny decodes JSON into plain values, numbers as written.
func decodeAny(t *rapid.T, data []byte) any {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return v
}

// BenchmarkAppendEvent encodes a message_accepted event, as the event
// log's writer does three times for every message on a durable store,
// with appendEvent and, as the baseline, with json.Marshal.
func BenchmarkAppendEvent(b *testing.B) {
	m := &Message{ID: "m-00000042", Seq: 42, From: "agent-00000007", To: "agent-00000008", TaskID: "task-3", Type: General,
		Payload: json.RawMessage(`{"text":"the figures for the third quarter are in the artifact a-12; check the totals against last year's"}`), SentAt: time.Now()}
	e := Event{Seq: 1234, Time: time.Now(), Kind: EventMessageAccepted, Task: m.TaskID, Agent: m.From, Turn: "m-00000041", Target: m.To, Message: m}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := json.Marshal(&e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendEvent", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for range b.N {
			var ok bool
			if buf, ok = appendEvent(buf[:0], &e); !ok {
				b.Fatal("refused")
			}
		}
	})
}

// TestTextIsMarshal: Text writes what marshal writes of a TextPayload,
// byte for byte, whatever the string.
func TestTextIsMarshal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := drawString(t, "text")
		want, err := marshal(TextPayload{Text: s})
		if err != nil {
			t.Fatal(err)
		}
		if got := Text(s); !bytes.Equal(got, want) {
			t.Fatalf("Text(%q) = %s, marshal %s", s, got, want)
		}
	})
}
