package agentsociety

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendEvent appends e's JSON, as the event log keeps it, to buf: what
// json.Marshal makes of e, field for field, written without reflection, as
// the log writes three events for every message on a durable store. It
// reports false, and buf as it was, for an event json.Marshal would refuse:
// a time RFC 3339 cannot write, or tool arguments that are not valid JSON.
// The raw JSON is copied as it is, not compacted. A message's payload is
// not checked again: the bus accepts only valid JSON, and a society opens
// only on a store whose pending messages carry it (see restore).
func appendEvent(buf []byte, e *Event) ([]byte, bool) {
	if len(e.Args) > 0 && !json.Valid(e.Args) {
		return buf, false
	}
	var err error
	b := strconv.AppendUint(append(buf, `{"seq":`...), e.Seq, 10)
	if b, err = appendTime(append(b, `,"time":`...), e.Time); err != nil {
		return buf, false
	}
	b = appendString(append(b, `,"kind":`...), string(e.Kind))
	b = appendField(b, "task", e.Task)
	b = appendField(b, "agent", e.Agent)
	b = appendField(b, "turn", e.Turn)
	b = appendField(b, "target", e.Target)
	b = appendField(b, "role", e.Role)
	b = appendField(b, "name", e.Name)
	b = appendField(b, "trace", e.Trace)
	if m := e.Message; m != nil {
		b = appendString(append(b, `,"message":{"ID":`...), m.ID)
		b = strconv.AppendUint(append(b, `,"Seq":`...), m.Seq, 10)
		b = appendString(append(b, `,"From":`...), m.From)
		b = appendString(append(b, `,"To":`...), m.To)
		b = appendString(append(b, `,"TaskID":`...), m.TaskID)
		b = appendString(append(b, `,"Type":`...), string(m.Type))
		b = append(b, `,"Payload":`...)
		if len(m.Payload) == 0 {
			b = append(b, "null"...)
		} else {
			b = append(b, m.Payload...)
		}
		if b, err = appendTime(append(b, `,"SentAt":`...), m.SentAt); err != nil {
			return buf, false
		}
		b = append(b, '}')
	}
	b = appendField(b, "request", e.Request)
	b = appendField(b, "artifact", e.Artifact)
	b = appendField(b, "status", e.Status)
	b = appendField(b, "code", string(e.Code))
	b = appendField(b, "detail", e.Detail)
	if len(e.Args) > 0 {
		b = append(append(b, `,"args":`...), e.Args...)
	}
	if u := e.Usage; u != nil {
		b = strconv.AppendInt(append(b, `,"usage":{"InputTokens":`...), int64(u.InputTokens), 10)
		b = strconv.AppendInt(append(b, `,"OutputTokens":`...), int64(u.OutputTokens), 10)
		b = append(b, '}')
	}
	b = appendInt(b, "attempt", int64(e.Attempt))
	b = appendInt(b, "count", int64(e.Count))
	b = appendInt(b, "duration", int64(e.Duration))
	return append(b, '}'), true
}

// appendTime appends t as time.Time.MarshalJSON does, or fails as it
// does for a time RFC 3339 cannot write.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b, err := t.AppendText(append(b, '"'))
	return append(b, '"'), err
}

// appendField appends ,"name":value, or nothing for an empty value, as
// omitempty does.
func appendField(b []byte, name, value string) []byte {
	if value == "" {
		return b
	}
	return appendString(append(append(append(b, `,"`...), name...), `":`...), value)
}

// appendInt appends ,"name":n, or nothing for 0, as omitempty does.
func appendInt(b []byte, name string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(append(append(b, `,"`...), name...), `":`...), n, 10)
}

// appendString appends s as a JSON string, escaped as json.Marshal escapes
// it: see appendQuoted.
func appendString(b []byte, s string) []byte { return appendQuoted(b, s, true) }

// appendQuoted appends s as a JSON string, escaped as encoding/json escapes
// it: quotes, backslashes and control characters (\b, \f, \n, \r and \t by
// their short forms), U+2028 and U+2029, invalid UTF-8 as U+FFFD, and, if
// html is set, <, > and & (json.Marshal's escaping, where json.Encoder with
// SetEscapeHTML(false) leaves them).
func appendQuoted[T string | json.RawMessage](b []byte, s T, html bool) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!html || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		// At most four bytes, converted on the stack.
		r, size := utf8.DecodeRuneInString(string(s[i:min(len(s), i+utf8.UTFMax)]))
		if r == utf8.RuneError && size == 1 {
			b = append(append(b, s[start:i]...), `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(b, s[start:]...), '"')
}
