package agentsociety

import (
	"encoding/json"
	"testing"
)

// escapedPayloads are general payloads as hosts and models commonly write
// them: json.Marshal's HTML escapes (a < b, R&D), and the \uXXXX of
// non-ASCII text that Python's json.dumps (ensure_ascii, the default of
// many OpenAI-compatible servers) writes in tool arguments.
var escapedPayloads = []struct{ name, payload string }{
	{"html", `{"text":"if a \u003c b \u0026\u0026 b \u003e c then R\u0026D wins"}`},
	{"non-ascii", `{"text":"\u8bf7\u5ba1\u9605\u8349\u7a3f\uff0c\u5e76\u5728\u4eca\u5929\u7ed9\u51fa\u610f\u89c1"}`},
}

// TestCheckGeneral_EscapesOfNoLetterAreNotDecoded: a general payload whose
// \u escapes cannot spell a letter of "text" is not decoded (no
// allocation), as one of plain words is not: every message a model
// behind such a server sends has them. A variant spelt with escapes is
// still refused.
func TestCheckGeneral_EscapesOfNoLetterAreNotDecoded(t *testing.T) {
	for _, p := range escapedPayloads {
		raw := json.RawMessage(p.payload)
		if n := testing.AllocsPerRun(100, func() { _ = checkGeneral(raw) }); n != 0 {
			t.Errorf("checkGeneral(%s): %v allocations, want 0: the payload is decoded though no escape in it can spell a key variant of text", p.payload, n)
		}
	}
	for _, p := range []string{`{"text":"a","\u0054ext":"b"}`, `{"text":"a","T\u0045XT":"b"}`, `{"text":"a","TE\u0078T":"b"}`} {
		if checkGeneral(json.RawMessage(p)) == nil {
			t.Errorf("checkGeneral(%s) accepted a case variant of text", p)
		}
	}
}

// BenchmarkCheckGeneral measures the check of a general payload with
// escapes, which is made on every general message.
func BenchmarkCheckGeneral(b *testing.B) {
	for _, p := range escapedPayloads {
		raw := json.RawMessage(p.payload)
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = checkGeneral(raw)
			}
		})
	}
}
