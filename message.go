package agentsociety

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"time"
)

// MessageType says what a message's payload holds (Requirement 8). The
// society checks every payload against its type before it accepts a message.
type MessageType string

// The message types.
const (
	// General is a plain message; its payload is any JSON object, usually
	// {"text": ...}. A key that differs from "text" only in case ("Text")
	// is refused: Message.Text and Decode would read it, the receiver's
	// model would not.
	General MessageType = "general"
	// TaskAssignment carries a Task Brief: the payload is the brief itself,
	// optionally with a "text".
	TaskAssignment MessageType = "task_assignment"
	// StatusReport tells how work is going: it needs a "status" or a "text".
	StatusReport MessageType = "status_report"
	// IntroductionRequest asks a contact to introduce an agent with a
	// capability; see [IntroductionRequestPayload].
	IntroductionRequest MessageType = "introduction_request"
	// IntroductionResponse introduces an agent; see [IntroductionResponsePayload].
	IntroductionResponse MessageType = "introduction_response"
	// CollaborationRequest asks an agent to do a subtask; see
	// [CollaborationRequestPayload].
	CollaborationRequest MessageType = "collaboration_request"
	// CollaborationResponse answers a collaboration request; see
	// [CollaborationResponsePayload].
	CollaborationResponse MessageType = "collaboration_response"
)

// MessageTypes returns every message type, in the order of Requirement 8.
// The slice is new at each call.
func MessageTypes() []MessageType {
	return []MessageType{TaskAssignment, StatusReport, IntroductionRequest,
		IntroductionResponse, CollaborationRequest, CollaborationResponse, General}
}

// Message is a message the society accepted. Its From, ID, Seq and SentAt are
// always the society's: a sender cannot set them.
type Message struct {
	ID      string
	Seq     uint64 // order of acceptance within one run of the society; a reopened society numbers on from its pending messages
	From    string
	To      string
	TaskID  string
	Type    MessageType
	Payload json.RawMessage // a JSON object
	SentAt  time.Time
}

// Text returns the payload's "text" field, or "" when it has none.
func (m Message) Text() string {
	var p struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Payload, &p) != nil {
		return ""
	}
	return p.Text
}

// Decode unmarshals the payload into v, typically one of the *Payload types.
func (m Message) Decode(v any) error { return json.Unmarshal(m.Payload, v) }

// Outgoing is what a sender says. The society fills in the sender, the
// message id and the time; TaskID defaults to the task the sender is working
// on and Type to [General]. A [CollaborationResponse] is on the task of the
// request it answers, whatever TaskID says: the requester's work on it goes
// on there.
//
// Payload is a json.RawMessage or []byte holding a JSON object, or any value
// that encodes to one (a map, one of the *Payload types, ...). Use [Text] for
// a plain text payload.
type Outgoing struct {
	To      string
	Type    MessageType
	TaskID  string
	Payload any
}

// Text returns the payload {"text": s}.
func Text(s string) json.RawMessage {
	b := make([]byte, 0, len(s)+len(`{"text":""}`))
	return append(appendQuoted(append(b, `{"text":`...), s, false), '}') // as marshal writes TextPayload{s}
}

// TextPayload is the payload of a plain text message.
type TextPayload struct {
	Text string `json:"text"`
}

// StatusReportPayload is the payload of a [StatusReport].
type StatusReportPayload struct {
	Status string `json:"status,omitempty"`
	Text   string `json:"text,omitempty"`
}

// IntroductionRequestPayload is the payload of an [IntroductionRequest].
//
// RequesterAgentID is set by an agent that asks on behalf of another, which
// asked it (Requirement 3.5): under ContactStrict, the agent asked may then
// introduce an agent to that requester as well (see ContactStrict).
type IntroductionRequestPayload struct {
	Reason             string `json:"reason"`
	RequiredCapability string `json:"required_capability"`
	RequesterAgentID   string `json:"requester_agent_id,omitempty"`
	Text               string `json:"text,omitempty"`
}

// IntroductionResponsePayload is the payload of an [IntroductionResponse].
// The society fills TargetRole and TargetInterfaceSpec with the target's real
// ones, whatever the sender wrote there (and drops them from an answer that
// introduces nobody), and adds the target to the contacts of the receiver,
// or of RequesterAgentID when it is set.
//
// RequesterAgentID serves chains of introducers (Requirement 3.5-3.6): when
// A asks X, and X, knowing nobody fitting, asks Y, then Y answers X with
// RequesterAgentID A; the target is added to A, not to X, and X forwards the
// answer to A.
//
// An introducer that knows nobody suitable answers with Advice saying so and
// no TargetAgentID: the answer is valid and introduces nobody.
type IntroductionResponsePayload struct {
	TargetAgentID       string         `json:"target_agent_id,omitempty"`
	RequesterAgentID    string         `json:"requester_agent_id,omitempty"`
	TargetRole          string         `json:"target_role,omitempty"`
	TargetInterfaceSpec *InterfaceSpec `json:"target_interface_spec,omitempty"`
	Advice              string         `json:"advice,omitempty"`
	Text                string         `json:"text,omitempty"`
}

// CollaborationRequestPayload is the payload of a [CollaborationRequest].
// The society generates RequestID when it is empty.
type CollaborationRequestPayload struct {
	RequestID          string          `json:"request_id,omitempty"`
	SubtaskDescription string          `json:"subtask_description"`
	Context            json.RawMessage `json:"context,omitempty"`
	// TimeoutSeconds, when positive, is how long the responder has: then
	// the society settles the request itself (see StatusTimeout). It may
	// not exceed MaxTimeoutSeconds.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	Text           string  `json:"text,omitempty"`
}

// RequestStatus is the status of a collaboration request, and of the
// collaboration_response that settles it. It is distinct from AgentStatus,
// an agent's lifecycle state.
type RequestStatus string

// The statuses of a collaboration request. A request is StatusPending until
// a response settles it; a response carries StatusCompleted, StatusError or
// StatusRejected; a request the society settled after its timeout is
// StatusTimeout, and its requester is told with a StatusError response.
const (
	StatusPending   RequestStatus = "pending"
	StatusCompleted RequestStatus = "completed"
	StatusError     RequestStatus = "error"
	StatusRejected  RequestStatus = "rejected"
	StatusTimeout   RequestStatus = "timeout"
)

// CollaborationResponsePayload is the payload of a [CollaborationResponse].
// Status is StatusCompleted with ResultData, or StatusError or StatusRejected
// with ErrorMessage.
type CollaborationResponsePayload struct {
	RequestID    string          `json:"request_id"`
	Status       RequestStatus   `json:"status"`
	ResultData   json.RawMessage `json:"result_data,omitempty"`
	ErrorMessage string          `json:"error_message,omitempty"`
	Text         string          `json:"text,omitempty"`
}

// fields is a payload decoded one level deep.
type fields map[string]json.RawMessage

// encodePayload turns an Outgoing payload into a compact JSON object.
func encodePayload(p any) (json.RawMessage, error) {
	var raw []byte
	switch v := p.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := marshal(v)
		if err != nil {
			return nil, &Error{Code: ErrInvalidMessageFormat, Message: "the payload does not encode as JSON: " + err.Error()}
		}
		raw = b
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, &Error{Code: ErrInvalidMessageFormat, Message: "the payload must be a JSON object"}
	}
	return bytes.Clone(trimmed), nil
}

// checkPayload checks that payload fits t. It returns the payload decoded one
// level deep for the types whose handling needs its fields, and nil for the
// others, so that general messages are never decoded.
//
// A general message, the commonest, is checked in a function of its own:
// checkTyped's large frame would grow the stack of every drainer that sends
// one (BenchmarkRoute).
func checkPayload(t MessageType, payload json.RawMessage) (fields, error) {
	if t == General {
		return nil, checkGeneral(payload)
	}
	return checkTyped(t, payload)
}

// checkGeneral checks a general message's payload. Its "text" is what the
// receiver's model reads (the key as written) and what Message.Text and
// Decode read (any case, the last one winning): a case variant beside it
// could show them two texts. The payload is decoded only when a key may be
// one.
func checkGeneral(payload json.RawMessage) error {
	if !mayHaveTextVariant(payload) {
		return nil
	}
	var f fields
	json.Unmarshal(payload, &f) // a JSON object: encodePayload checked
	for k := range f {
		if k != "text" && strings.EqualFold(k, "text") {
			return formatError(General, "the payload's field "+strconvQuote(k)+` must be written "text"`, nil)
		}
	}
	return nil
}

// checkTyped is checkPayload for a type other than general.
func checkTyped(t MessageType, payload json.RawMessage) (fields, error) {
	var f fields
	if err := json.Unmarshal(payload, &f); err != nil {
		return nil, formatError(t, "the payload must be a JSON object", nil)
	}
	// Message.Decode into the type's *Payload struct matches keys
	// case-insensitively, the last one winning, where the society reads
	// them by their exact names: a case variant of a field could make the
	// receiver read what the society did not check.
	if typ := payloadTypes[t]; typ != nil {
		names, _ := jsonFields(typ)
		for k := range f {
			for _, n := range names {
				if k != n && strings.EqualFold(k, n) {
					return nil, formatError(t, "the payload's field "+strconvQuote(k)+" must be written "+strconvQuote(n), nil)
				}
			}
		}
	}
	var missing []string
	problem, malformed := "the payload lacks fields its type requires", false
	need := func(names ...string) {
		for _, n := range names {
			if !f.hasText(n) {
				missing = append(missing, n)
			}
		}
	}
	switch t {
	case TaskAssignment:
		var b TaskBrief
		if err := json.Unmarshal(payload, &b); err != nil {
			return nil, formatError(t, "the payload is not a task brief: "+err.Error(), nil)
		}
		if err := b.Validate(); err != nil {
			return nil, formatError(t, "the payload must hold a complete task brief", err.(*Error).MissingFields)
		}
	case StatusReport:
		if !f.hasText("status") && !f.hasText("text") {
			missing = append(missing, "status")
		}
	case IntroductionRequest:
		need("reason", "required_capability")
	case IntroductionResponse:
		// An introducer that knows nobody suitable answers with advice
		// and no target: a valid answer that introduces nobody.
		if _, given := f["target_agent_id"]; given || !f.hasText("advice") {
			need("target_agent_id")
		}
	case CollaborationRequest:
		need("subtask_description")
		if _, ok := f["request_id"]; ok && !f.hasText("request_id") {
			problem, malformed = "request_id, when given, must be a non-empty string", true
		}
		if _, ok := timeoutOf(f); !ok {
			problem, malformed = timeoutProblem, true
		}
	case CollaborationResponse:
		need("request_id", "status")
		switch status := RequestStatus(f.text("status")); {
		case status == StatusCompleted:
			if v, ok := f["result_data"]; !ok || bytes.Equal(v, []byte("null")) {
				missing = append(missing, "result_data")
			}
		case status == StatusError || status == StatusRejected:
			need("error_message")
		case !blank(string(status)):
			return nil, formatError(t, `status must be "completed", "error" or "rejected", not `+strconvQuote(string(status)), missing)
		}
	default:
		return nil, formatError(t, "unknown message_type "+strconvQuote(string(t)), nil)
	}
	if len(missing) > 0 || malformed {
		return nil, formatError(t, problem, missing)
	}
	// Receivers decode the payload into its type's struct: a field of
	// another kind would fail every Decode of it.
	if typ := payloadTypes[t]; typ != nil {
		names, types := jsonFields(typ)
		for _, n := range names {
			v, ok := f[n]
			if !ok || t == IntroductionResponse && (n == "target_role" || n == "target_interface_spec") {
				continue // absent, or the society's to fill in
			}
			if !fitsKind(types[n], v) {
				return nil, formatError(t, "the payload's field "+strconvQuote(n)+" must be "+jsonKind(types[n])+", not "+valueKind(v), nil)
			}
		}
	}
	return f, nil
}

// fitsKind reports whether the JSON value v decodes into a value of type
// t. The payloads' kinds, a string, a number or any JSON, are told from
// v's first byte, without decoding v: every typed message is checked.
func fitsKind(t reflect.Type, v json.RawMessage) bool {
	switch {
	case v[0] == 'n':
		return true // null decodes into anything, as nothing
	case t == rawMessageType:
		return true
	case t.Kind() == reflect.String:
		return v[0] == '"'
	case t.Kind() == reflect.Float64:
		// A number (timeout_seconds, whose range timeoutOf checks).
		return v[0] == '-' || '0' <= v[0] && v[0] <= '9'
	}
	return json.Unmarshal(v, reflect.New(t).Interface()) == nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// valueKind names the kind of the JSON value v, as jsonKind names the
// kind a Go type takes, for a refusal.
func valueKind(v json.RawMessage) string {
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "a JSON object"
	case '[':
		return "an array"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	}
	return "a number"
}

// mayHaveTextVariant reports whether payload may hold a key that differs
// from "text" only in case: it has a quoted case variant of text, or a
// JSON escape \u, which could spell one. A payload of plain words has
// neither, and is not decoded. ("text" has no letter that Unicode folds
// from outside ASCII, as it does k and s.)
func mayHaveTextVariant(payload []byte) bool {
	for i := 0; i < len(payload); i++ {
		switch payload[i] {
		case '\\':
			// Only the escape of an ASCII letter (\u0041-\u007A) can spell
			// a letter of text: "text" has no letter that Unicode folds from
			// outside ASCII. Others (\u003c of json.Marshal's HTML escapes,
			// the \uXXXX of non-ASCII text) cannot.
			if i+5 < len(payload) && payload[i+1] == 'u' && payload[i+2] == '0' && payload[i+3] == '0' && '4' <= payload[i+4] && payload[i+4] <= '7' {
				return true
			}
			i++ // the escaped character
		case '"':
			if k := payload[i+1 : min(i+6, len(payload))]; len(k) == 5 && k[4] == '"' &&
				k[0]|0x20 == 't' && k[1]|0x20 == 'e' && k[2]|0x20 == 'x' && k[3]|0x20 == 't' && string(k[:4]) != "text" {
				return true
			}
		}
	}
	return false
}

// reportStatus returns the status of m if it is a status_report, and ""
// otherwise.
func reportStatus(m *Message) string {
	if m.Type != StatusReport {
		return ""
	}
	var p StatusReportPayload
	if m.Decode(&p) != nil {
		return ""
	}
	return p.Status
}

// payloadTypes are the payloads of the typed messages but task_assignment
// (a brief the society decodes as its receivers do), by type.
var payloadTypes = map[MessageType]reflect.Type{
	StatusReport:          reflect.TypeFor[StatusReportPayload](),
	IntroductionRequest:   reflect.TypeFor[IntroductionRequestPayload](),
	IntroductionResponse:  reflect.TypeFor[IntroductionResponsePayload](),
	CollaborationRequest:  reflect.TypeFor[CollaborationRequestPayload](),
	CollaborationResponse: reflect.TypeFor[CollaborationResponsePayload](),
}

func formatError(t MessageType, msg string, missing []string) *Error {
	return &Error{Code: ErrInvalidMessageFormat, Message: msg, MessageType: t, MissingFields: missing}
}

// text returns field name as a string, or "" when it is absent or not a string.
func (f fields) text(name string) string {
	var s string
	if v, ok := f[name]; ok && json.Unmarshal(v, &s) == nil {
		return s
	}
	return ""
}

// hasText reports whether field name is a string that is not blank.
func (f fields) hasText(name string) bool { return !blank(f.text(name)) }

// set replaces field name with v encoded.
func (f fields) set(name string, v any) {
	b, _ := marshal(v) // only strings and *InterfaceSpec are set
	f[name] = b
}

func (f fields) encode() json.RawMessage {
	b, _ := marshal(f) // values are valid JSON already
	return b
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// marshal is json.Marshal without its HTML escaping: payloads are read by
// models and people, who should see "<script>", not "\u003cscript\u003e".
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
