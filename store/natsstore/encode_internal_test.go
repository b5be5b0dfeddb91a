package natsstore

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"agentsociety/store"
)

// encodeMessage writes a message's record as json.Marshal does, whether
// it takes its own way or json.Marshal's.
func TestEncodeMessage_AsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 11, 24, 0, 43, 6, 209122117, time.UTC)
	base := store.Message{ID: "msg-a6712910-20075", Seq: 20075, From: "agent-10", To: "agent-9", TaskID: "task-f4add076599716cc",
		Type: "general", Payload: json.RawMessage(`{"text":"hello, world"}`), SentAt: at}
	cases := map[string]func(m *store.Message){
		"plain":                 func(m *store.Message) {},
		"no task":               func(m *store.Message) { m.TaskID = "" },
		"no payload":            func(m *store.Message) { m.Payload = nil },
		"empty payload":         func(m *store.Message) { m.Payload = json.RawMessage{} },
		"payload with spaces":   func(m *store.Message) { m.Payload = json.RawMessage(`{ "text" : [1, 2] }`) },
		"payload with newline":  func(m *store.Message) { m.Payload = json.RawMessage("{\"a\":\n1}") },
		"payload with html":     func(m *store.Message) { m.Payload = json.RawMessage(`{"text":"<b>&</b>"}`) },
		"payload with u2028":    func(m *store.Message) { m.Payload = json.RawMessage("{\"text\":\"a\u2028b\"}") },
		"payload with escapes":  func(m *store.Message) { m.Payload = json.RawMessage(`{"text":"a\"b\\ \u00e9"}`) },
		"payload a string":      func(m *store.Message) { m.Payload = json.RawMessage(`"just text"`) },
		"payload not json":      func(m *store.Message) { m.Payload = json.RawMessage(`{"text":`) },
		"id with quote":         func(m *store.Message) { m.ID = `a"b` },
		"from with html":        func(m *store.Message) { m.From = "a<b>" },
		"to with unicode":       func(m *store.Message) { m.To = "agent-é" },
		"type with control":     func(m *store.Message) { m.Type = "a\tb" },
		"task with invalid utf": func(m *store.Message) { m.TaskID = "a\xffb" },
		"time in a zone":        func(m *store.Message) { m.SentAt = at.In(time.FixedZone("x", 3600+1800)) },
		"time zero":             func(m *store.Message) { m.SentAt = time.Time{} },
		"time past 9999":        func(m *store.Message) { m.SentAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			m := base
			change(&m)
			want, wantErr := json.Marshal(fromMessage(m))
			got, err := encodeMessage(&m)
			if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
				t.Errorf("encodeMessage = %s, %v; json.Marshal = %s, %v", got, err, want, wantErr)
			}
		})
	}
}

func FuzzEncodeMessage(f *testing.F) {
	f.Add("msg-1", "agent-1", "agent-2", "task-1", "general", []byte(`{"text":"hi"}`), int64(1))
	f.Add("m", "a<", "b", "", "t", []byte(`{ "a" : 1 }`), int64(-1))
	f.Add("m", "a", "b", "c", "t", []byte("\"\u2028\""), int64(253402300800))
	f.Fuzz(func(t *testing.T, id, from, to, task, typ string, payload []byte, unix int64) {
		m := store.Message{ID: id, Seq: 7, From: from, To: to, TaskID: task, Type: typ, Payload: payload, SentAt: time.Unix(unix, 5).UTC()}
		want, wantErr := json.Marshal(fromMessage(m))
		got, err := encodeMessage(&m)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Errorf("encodeMessage = %s, %v; json.Marshal = %s, %v", got, err, want, wantErr)
		}
	})
}

// An ordered record encoded without its First and given it by withFirst
// is as json.Marshal writes it with its First.
func TestWithFirst_AsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	rec := fromAgent(store.Agent{ID: "agent-1", RoleID: "role-1", ParentID: "root", Status: "active", CreatedAt: at, Brief: json.RawMessage(`{"o":1}`)})
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got := withFirst(data, 0); !bytes.Equal(got, data) {
		t.Errorf("withFirst(data, 0) = %s, want %s", got, data)
	}
	rec.First = 42
	want, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got := withFirst(data, 42); !bytes.Equal(got, want) {
		t.Errorf("withFirst(data, 42) = %s, want %s", got, want)
	}
}

// readAck reads the answers to a plain message alike whether quickAck
// takes them or json.Unmarshal.
func TestReadAck_Quick(t *testing.T) {
	for _, c := range []struct {
		data  string
		quick bool // read by quickAck
		seq   uint64
		err   bool
	}{
		{`{"stream":"KV_c1","seq":40336}`, true, 40336, false},
		{`{"stream":"KV_c1","domain":"hub","seq":7}`, true, 7, false},
		{`{"stream":"KV_c1","seq":7,"duplicate":true}`, false, 7, false},
		{`{"stream":"KV_c1","seq":7,"batch":"x","count":1}`, false, 7, false},
		{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}`, false, 0, true},
		{`{"stream":"KV_c1","seq":}`, false, 0, true},
		{`{"stream":"KV_c1","seq":-1}`, false, 0, true},
		{`{"stream":"KV_\"c1\",\"seq\":9","seq":7}`, false, 7, false},
		{`not json`, false, 0, true},
	} {
		_, quick := quickAck([]byte(c.data))
		seq, err := readAck([]byte(c.data), 1)
		if quick != c.quick || seq != c.seq || (err != nil) != c.err {
			t.Errorf("%s: quick %v, readAck = %d, %v; want quick %v, %d, error %v", c.data, quick, seq, err, c.quick, c.seq, c.err)
		}
	}
}
