package natsstore

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"agentsociety/store"
)

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

// A record of ends, as endParts writes it, is the JSON of an endsRec.
func TestEndParts_AsJSONMarshal(t *testing.T) {
	for _, key := range []string{"m.bTE", `m."<&>\` + "\x01\u00e9"} {
		ends := []keyRev{{key, 7}, {"m.bTI", 1 << 60}}
		b := append(appendEnd(append(appendEnd([]byte(`{"ends":[`), ends[0]), ','), ends[1]), "]}"...)
		want, err := json.Marshal(endsRec{Ends: ends})
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != string(want) {
			t.Errorf("got %s\nwant %s", b, want)
		}
	}
}
