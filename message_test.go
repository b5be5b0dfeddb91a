package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	as "agentsociety"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

// Property 10: payloads are checked against their message type.

// p10Case is one generated message with what the spec says of it.
type p10Case struct {
	typ     as.MessageType
	payload any
	valid   bool
	missing []string
	// request, when set, is the id of a collaboration request the receiver
	// must have sent the sender before the message is sent, so that a
	// well-formed collaboration_response answers a pending request addressed
	// to its sender.
	request string
}

type fieldState int

const (
	fieldAbsent fieldState = iota
	fieldBlank
	fieldPresent
	fieldWrongType
)

var wrongTypes = rapid.SampledFrom([]any{42, true, nil, []any{"x"}, map[string]any{"text": "x"}})

// drawField sets obj[name] to an absent, blank, present (from present) or
// wrongly typed value; with wantValid it is always present. It reports
// whether the field holds a non-blank string.
func drawField(t *rapid.T, obj map[string]any, name string, wantValid bool, states []fieldState, present func() any) bool {
	st := fieldPresent
	if !wantValid {
		st = rapid.SampledFrom(states).Draw(t, name+".state")
	}
	switch st {
	case fieldBlank:
		obj[name] = blanks.Draw(t, name+".blank")
	case fieldPresent:
		obj[name] = present()
	case fieldWrongType:
		obj[name] = wrongTypes.Draw(t, name+".wrong")
	}
	return st == fieldPresent
}

var allFieldStates = []fieldState{fieldAbsent, fieldBlank, fieldPresent, fieldWrongType}

func drawP10(t *rapid.T, typ as.MessageType, targets []string, newRequestID func() string) p10Case {
	c := p10Case{typ: typ}
	wantValid := rapid.Bool().Draw(t, "want valid")
	text := func(label string) func() any {
		return func() any {
			return rapid.SampledFrom([]string{"需要前端开发能力", "x", " padded ", "计算器"}).Draw(t, label)
		}
	}
	obj := map[string]any{}
	if rapid.Bool().Draw(t, "text?") && typ != as.StatusReport {
		obj["text"] = rapid.SampledFrom([]string{"你好", "", " "}).Draw(t, "text")
	}
	need := func(name string, ok bool) {
		if !ok {
			c.missing = append(c.missing, name)
		}
	}
	wrongKind := false
	switch typ {
	case as.General:
		if !wantValid {
			c.payload = rapid.SampledFrom([]json.RawMessage{json.RawMessage(`[]`), json.RawMessage(`"text"`), json.RawMessage(`42`), json.RawMessage(`null`), json.RawMessage(`[{"text":"x"}]`)}).Draw(t, "non-object")
			return c
		}
		if rapid.Bool().Draw(t, "extra?") {
			obj["anything"] = map[string]any{"nested": []any{1, "二"}}
		}
	case as.TaskAssignment:
		// A brief's fields of the wrong JSON type do not decode at all; null
		// is the one wrong value that decodes (to missing).
		states := []fieldState{fieldAbsent, fieldBlank, fieldPresent}
		str := func(name string) {
			ok := drawField(t, obj, name, wantValid, states, text(name))
			if !ok && !wantValid && rapid.Bool().Draw(t, name+".null?") {
				obj[name] = nil
			}
			need(name, ok)
		}
		str("objective")
		cons := 2
		if !wantValid {
			cons = rapid.IntRange(0, 3).Draw(t, "constraints.state")
		}
		switch cons {
		case 0: // absent
		case 1:
			obj["constraints"] = nil
		case 2:
			obj["constraints"] = []string{"静态网页"}
		case 3:
			obj["constraints"] = []string{}
		}
		need("constraints", cons >= 2)
		str("inputs")
		str("outputs")
		str("completion_criteria")
	case as.StatusReport:
		status := drawField(t, obj, "status", false, allFieldStates, text("status"))
		txt := drawField(t, obj, "text", false, allFieldStates, text("text"))
		if wantValid && !status && !txt {
			obj["status"] = "进行中"
			status = true
		}
		need("status", status || txt)
		// A field of the wrong kind beside one that will do is refused
		// too, as no receiver could decode it; null reads as absent.
		for _, name := range []string{"status", "text"} {
			if v, ok := obj[name]; ok && v != nil {
				if _, str := v.(string); !str {
					wrongKind = true
				}
			}
		}
	case as.IntroductionRequest:
		need("reason", drawField(t, obj, "reason", wantValid, allFieldStates, text("reason")))
		need("required_capability", drawField(t, obj, "required_capability", wantValid, allFieldStates, text("required_capability")))
	case as.IntroductionResponse:
		ok := drawField(t, obj, "target_agent_id", wantValid, allFieldStates, func() any {
			return rapid.SampledFrom(targets).Draw(t, "target")
		})
		_, given := obj["target_agent_id"]
		advice := rapid.Bool().Draw(t, "advice?")
		if advice {
			obj["advice"] = "找他做代码评审"
		}
		// An introducer that knows nobody suitable answers with advice
		// alone; a target it gives must be valid.
		need("target_agent_id", ok || !given && advice)
		if rapid.Bool().Draw(t, "fake role?") {
			obj["target_role"] = "假角色"
			obj["target_interface_spec"] = map[string]any{"services": "fake"}
		}
	case as.CollaborationRequest:
		need("subtask_description", drawField(t, obj, "subtask_description", wantValid, allFieldStates, text("subtask_description")))
		rid := fieldAbsent
		if !wantValid {
			rid = rapid.SampledFrom(allFieldStates).Draw(t, "request_id.state")
		} else if rapid.Bool().Draw(t, "request_id?") {
			rid = fieldPresent
		}
		switch rid {
		case fieldBlank:
			obj["request_id"] = blanks.Draw(t, "request_id.blank")
		case fieldPresent:
			obj["request_id"] = newRequestID()
		case fieldWrongType:
			// null reads as absent; a number or a list is a malformed id.
			obj["request_id"] = rapid.SampledFrom([]any{7, []any{"r"}}).Draw(t, "request_id.wrong")
		}
		if rapid.Bool().Draw(t, "context?") {
			obj["context"] = map[string]any{"artifact": "artifact:a-1"}
		}
		c.valid = len(c.missing) == 0 && (rid == fieldAbsent || rid == fieldPresent)
		c.payload = obj
		return c
	case as.CollaborationResponse:
		ridOK := drawField(t, obj, "request_id", wantValid, allFieldStates, func() any {
			c.request = newRequestID()
			return c.request
		})
		need("request_id", ridOK)
		statuses := []as.RequestStatus{"", "blank", "wrong", as.StatusCompleted, as.StatusError, as.StatusRejected, "done", "COMPLETED"}
		if wantValid {
			statuses = []as.RequestStatus{as.StatusCompleted, as.StatusError, as.StatusRejected}
		}
		status := rapid.SampledFrom(statuses).Draw(t, "status")
		bogus := false
		switch status {
		case "":
			need("status", false)
		case "blank":
			obj["status"] = blanks.Draw(t, "status.blank")
			need("status", false)
		case "wrong":
			obj["status"] = wrongTypes.Draw(t, "status.wrong")
			need("status", false)
		case as.StatusCompleted:
			obj["status"] = status
			rd := 2
			if !wantValid {
				rd = rapid.IntRange(0, 2).Draw(t, "result_data.state")
			}
			switch rd {
			case 1:
				obj["result_data"] = nil
			case 2:
				obj["result_data"] = rapid.SampledFrom([]any{map[string]any{"ref": "artifact:a-1"}, "结果", 0, false, []any{}}).Draw(t, "result_data")
			}
			need("result_data", rd == 2)
		case as.StatusError, as.StatusRejected:
			obj["status"] = status
			need("error_message", drawField(t, obj, "error_message", wantValid, allFieldStates, text("error_message")))
		default:
			obj["status"] = status
			bogus = true
		}
		c.valid = len(c.missing) == 0 && !bogus
		c.payload = obj
		return c
	}
	c.valid = len(c.missing) == 0 && !wrongKind
	if len(obj) == 0 && rapid.Bool().Draw(t, "nil payload?") {
		c.payload = nil // means {}
	} else {
		c.payload = obj
	}
	return c
}

func TestProperty10_MessageTypeValidation(t *testing.T) {
	type tally struct{ valid, invalid int }
	counts := map[as.MessageType]*tally{}
	for _, typ := range as.MessageTypes() {
		counts[typ] = &tally{}
	}
	rapid.Check(t, func(t *rapid.T) {
		rec := newMailboxes()
		s, done := openSociety(t, as.Config{})
		defer done()
		ctx := context.Background()
		root := actorOf(t, s, as.RootID)
		role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "worker", InterfaceSpec: &as.InterfaceSpec{Services: "写代码"}})
		if err != nil {
			t.Fatal(err)
		}
		spawn := func(task string, b *as.TaskBrief, beh as.Behavior) string {
			a, _, err := root.WithTask(task).SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: b, Behavior: beh})
			if err != nil {
				t.Fatal(err)
			}
			return a.ID
		}
		b := spawn("t1", validBrief(), nil)
		c := spawn("t2", validBrief(), rec.behavior())
		brief := validBrief()
		brief.Collaborators = []as.Collaborator{{AgentID: b}, {AgentID: as.UserID}}
		a := spawn("t3", brief, nil)
		// a sends, c receives; a can introduce the agents it knows but c.
		targets := []string{as.RootID, b, as.UserID}
		sender, receiver := actorOf(t, s, a), actorOf(t, s, c)
		n := 0
		newRequestID := func() string {
			n++
			return fmt.Sprintf("req-p10-%d", n)
		}

		var accepted []string
		for range rapid.IntRange(1, 8).Draw(t, "messages") {
			typ := rapid.SampledFrom(as.MessageTypes()).Draw(t, "type")
			pc := drawP10(t, typ, targets, newRequestID)
			if pc.request != "" {
				if _, err := receiver.Send(ctx, as.Outgoing{To: a, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: pc.request, SubtaskDescription: "做个子任务"}}); err != nil {
					t.Fatalf("setting up request %s: %v", pc.request, err)
				}
			}
			agentsBefore, before := s.Agents(), allContacts(t, s)
			msg, err := sender.Send(ctx, as.Outgoing{To: c, Type: typ, Payload: pc.payload})
			if pc.valid {
				counts[typ].valid++
				if err != nil {
					t.Fatalf("%s with payload %s refused: %v", typ, showPayload(pc.payload), err)
				}
				if msg.Type != typ || msg.From != a || msg.To != c {
					t.Fatalf("accepted %+v, want a %s from %s to %s", msg, typ, a, c)
				}
				accepted = append(accepted, msg.ID)
				continue
			}
			counts[typ].invalid++
			if err == nil {
				t.Fatalf("%s with payload %s accepted, want invalid_message_format (missing %v)", typ, showPayload(pc.payload), pc.missing)
			}
			e := wantCode(t, err, as.ErrInvalidMessageFormat)
			if e.MessageType != typ {
				t.Fatalf("refusal of %s names message type %q", typ, e.MessageType)
			}
			if diff := cmp.Diff(pc.missing, e.MissingFields, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("%s with payload %s: MissingFields (-want +got):\n%s", typ, showPayload(pc.payload), diff)
			}
			if diff := cmp.Diff(before, allContacts(t, s)); diff != "" {
				t.Fatalf("a refused message changed registries (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(agentsBefore, s.Agents()); diff != "" {
				t.Fatalf("a refused message changed the agents (-before +after):\n%s", diff)
			}
		}
		// The receiver saw the accepted messages, in order, and nothing else.
		marker, err := sender.SendText(ctx, c, "marker")
		if err != nil {
			t.Fatal(err)
		}
		rec.expect(t, c, append(accepted, marker.ID)...)
	})
	for _, typ := range as.MessageTypes() {
		if c := counts[typ]; c.valid == 0 || c.invalid == 0 {
			t.Errorf("type %s: the generator made %d valid and %d invalid payloads; want both", typ, c.valid, c.invalid)
		}
	}
}

func showPayload(payload any) string {
	if raw, ok := payload.(json.RawMessage); ok {
		return string(raw)
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Sprintf("%#v", payload)
	}
	return string(b)
}

// TestPayload_CaseVariantKeysAreRefused: the society
// checks and acts on a typed payload's fields by their exact names
// (request_id, status, ...), while Message.Decode into the documented
// *Payload types (which Collaborate's callers, the send_message tool's
// result and code-driven agents use) matches keys case-insensitively, the
// last one winning. A payload with a case variant of a field must not be
// accepted with one meaning for the society and another for its receiver.
func TestPayload_CaseVariantKeysAreRefused(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	s, lead, helper := twoAgents(t, in)
	_ = s

	// A request the society registers as r1, which its receiver decodes as r2.
	m, err := lead.Send(ctx, as.Outgoing{To: helper.ID(), Type: as.CollaborationRequest,
		Payload: json.RawMessage(`{"subtask_description":"x","request_id":"r1","Request_ID":"r2"}`)})
	if err == nil {
		var p as.CollaborationRequestPayload
		if err := m.Decode(&p); err != nil {
			t.Fatal(err)
		}
		_, rerr := helper.Respond(ctx, p.RequestID, as.CollaborationResponsePayload{Status: as.StatusRejected, ErrorMessage: "no"})
		if p.RequestID != "r1" || rerr != nil {
			t.Errorf("accepted a collaboration_request the society registered as r1 whose receiver decodes request_id %q; answering it: %v", p.RequestID, rerr)
		}
	} else if !errors.Is(err, as.ErrInvalidMessageFormat) {
		t.Fatalf("refused with %v, want ErrInvalidMessageFormat", err)
	}

	// A response the society settles as rejected, which the requester
	// blocked in Collaborate decodes as completed.
	go func() {
		for m := range in.ch {
			if m.Type != as.CollaborationRequest || m.To != helper.ID() {
				continue
			}
			var p as.CollaborationRequestPayload
			m.Decode(&p)
			if p.SubtaskDescription != "y" {
				continue
			}
			payload := `{"request_id":"` + p.RequestID + `","status":"rejected","error_message":"no","Status":"completed"}`
			if _, err := helper.Send(ctx, as.Outgoing{To: lead.ID(), Type: as.CollaborationResponse, Payload: json.RawMessage(payload)}); err != nil {
				// Refused: answer properly so that Collaborate returns.
				helper.Respond(ctx, p.RequestID, as.CollaborationResponsePayload{Status: as.StatusRejected, ErrorMessage: "no"})
			}
			return
		}
	}()
	out, err := lead.Collaborate(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "y"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var p as.CollaborationResponsePayload
	if err := out.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.Status != as.StatusRejected {
		t.Errorf("the society settled the request as rejected; the requester decodes status %q from %s", p.Status, out.Payload)
	}
}

// TestPayload_GeneralTextCaseVariantIsRefused: a general message's "text"
// is what its receiver's model and the user's console read (FormatMessage
// takes the key as written), and what a Go receiver or host reads with
// Message.Text or Decode into TextPayload, which match keys
// case-insensitively, the last one winning. A payload with both "text" and
// a case variant of it showed one text to the model and another to the
// program, so an agent could report "artifact:good" to the person at the
// console and "artifact:evil" to the host's code. It is refused, as a case
// variant of a typed payload's field is; a payload that only mentions Text
// in its words is not.
func TestPayload_GeneralTextCaseVariantIsRefused(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	s, lead, helper := twoAgents(t, in)
	for _, payload := range []string{
		`{"text":"see artifact:good","Text":"see artifact:evil"}`,
		`{"text":"see artifact:good","TEXT":"see artifact:evil"}`,
		`{"text":"see artifact:good","\u0054ext":"see artifact:evil"}`,
		`{"TeXt":"see artifact:evil"}`,
	} {
		m, err := lead.Send(ctx, as.Outgoing{To: helper.ID(), Payload: json.RawMessage(payload)})
		if err == nil {
			t.Errorf("accepted %s: the model reads\n%s\nand Text() is %q", payload, s.Format(m), m.Text())
			continue
		}
		e := wantCode(t, err, as.ErrInvalidMessageFormat)
		if e.MessageType != as.General || !strings.Contains(e.Message, `"text"`) {
			t.Errorf("refused %s with %+v, want message_type general and the key to write", payload, e)
		}
	}
	for _, payload := range []string{
		`{"text":"write \"Text\" and TEXT as the spec says"}`,
		`{"note":"\u4f60\u597d","text":"x"}`,
		`{"context":{"Text":"nested keys are the sender's own"},"text":"x"}`,
	} {
		if _, err := lead.Send(ctx, as.Outgoing{To: helper.ID(), Payload: json.RawMessage(payload)}); err != nil {
			t.Errorf("refused %s: %v", payload, err)
		}
	}
}

// TestPayload_FieldsOfTheWrongKindAreRefused: a receiver reads a typed
// message by decoding it into its payload struct (Message.Decode into
// StatusReportPayload, ...), as the society's own tools and Go behaviours
// do. A payload whose field is of another JSON kind than the struct's
// ("text": 5, "requester_agent_id": 42) was accepted whenever the society
// did not need that field itself, and every receiver's Decode of it failed:
// a sender could make any Go receiver fail to read its message. It is
// refused, naming the field and the kind it must be.
func TestPayload_FieldsOfTheWrongKindAreRefused(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	_, lead, helper := twoAgents(t, in)
	// A pending request of helper's to lead, which helper answers below.
	req, err := helper.Send(ctx, as.Outgoing{To: lead.ID(), Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: "r1", SubtaskDescription: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = req
	for _, c := range []struct {
		typ     as.MessageType
		payload string
		field   string
		decode  any
	}{
		{as.StatusReport, `{"status":"done","text":{"a":1}}`, "text", &as.StatusReportPayload{}},
		{as.IntroductionRequest, `{"reason":"r","required_capability":"c","requester_agent_id":42}`, "requester_agent_id", &as.IntroductionRequestPayload{}},
		{as.IntroductionResponse, `{"advice":"I know nobody","text":["a"]}`, "text", &as.IntroductionResponsePayload{}},
		{as.CollaborationRequest, `{"subtask_description":"x","text":true}`, "text", &as.CollaborationRequestPayload{}},
		{as.CollaborationResponse, `{"request_id":"r1","status":"rejected","error_message":"no","text":7}`, "text", &as.CollaborationResponsePayload{}},
	} {
		m, err := lead.Send(ctx, as.Outgoing{To: helper.ID(), Type: c.typ, Payload: json.RawMessage(c.payload)})
		if err == nil {
			if derr := m.Decode(c.decode); derr != nil {
				t.Errorf("accepted the %s %s, which its receiver cannot decode: %v", c.typ, c.payload, derr)
			}
			continue
		}
		e := wantCode(t, err, as.ErrInvalidMessageFormat)
		if e.MessageType != c.typ || !strings.Contains(e.Message, strconv.Quote(c.field)) {
			t.Errorf("refused the %s %s with %+v, want its message_type and the field %q named", c.typ, c.payload, e, c.field)
		}
	}
	// The fields the society fills in itself are not the sender's to get
	// right: an introducer that writes a role where an object goes is not
	// refused for it.
	if _, err := lead.Send(ctx, as.Outgoing{To: helper.ID(), Type: as.IntroductionResponse,
		Payload: json.RawMessage(`{"target_agent_id":"root","target_role":7,"target_interface_spec":"a tester"}`)}); err != nil {
		t.Errorf("an introduction whose target_role and target_interface_spec the society replaces was refused: %v", err)
	}
}
