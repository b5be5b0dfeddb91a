package agentsociety_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	as "agentsociety"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

// ---------------------------------------------------------------------------
// Properties 3 and 4: registries at birth.

func TestProperty3_ContactRegistryInitialisation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, done := ptOpen(t, as.Config{})
		defer done()

		// root knows exactly user, and user exactly root, from the start.
		wantRoot := []as.Contact{{ID: as.UserID, Role: as.UserID, Source: as.SourceSystem}}
		wantUser := []as.Contact{{ID: as.RootID, Role: as.RootID, Source: as.SourceSystem}}
		if diff := cmp.Diff(wantRoot, ptContacts(t, s, as.RootID), ptIgnoreAddedAt); diff != "" {
			t.Fatalf("root's initial registry (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantUser, ptContacts(t, s, as.UserID), ptIgnoreAddedAt); diff != "" {
			t.Fatalf("user's initial registry (-want +got):\n%s", diff)
		}

		m := ptNewModel()
		agents := ptGrowTree(t, s, m, rapid.IntRange(1, 8).Draw(t, "spawns"), nil, func(parent, child string) {
			// A new agent knows its parent, and only its parent (its brief
			// names no collaborators).
			want := []as.Contact{{ID: parent, Role: m.role[parent], InterfaceSpec: m.spec[parent], Source: as.SourceParent}}
			if diff := cmp.Diff(want, ptContacts(t, s, child), ptIgnoreAddedAt); diff != "" {
				t.Fatalf("registry of new agent %s, child of %s (-want +got):\n%s", child, parent, diff)
			}
		})
		// The registries never forget: every agent still knows its parent.
		for _, id := range agents[1:] {
			a, _ := s.Agent(id)
			c := ptContacts(t, s, id)
			if len(c) == 0 || c[0].ID != a.ParentID || c[0].Source != as.SourceParent || c[0].Role != m.role[a.ParentID] {
				t.Fatalf("registry of %s does not start with its parent %s: %+v", id, a.ParentID, c)
			}
		}
		// Spawning told user nothing.
		if diff := cmp.Diff(wantUser, ptContacts(t, s, as.UserID), ptIgnoreAddedAt); diff != "" {
			t.Fatalf("user's registry after spawns (-want +got):\n%s", diff)
		}
		m.check(t, s)
	})
}

func TestProperty4_ParentKnowsChild(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, done := ptOpen(t, as.Config{})
		defer done()
		m := ptNewModel()
		ptGrowTree(t, s, m, rapid.IntRange(1, 8).Draw(t, "spawns"), nil, func(parent, child string) {
			c, ok := ptFindContact(ptContacts(t, s, parent), child)
			if !ok {
				t.Fatalf("parent %s does not know its new child %s", parent, child)
			}
			want := as.Contact{ID: child, Role: m.role[child], InterfaceSpec: m.spec[child], Source: as.SourceChild}
			if diff := cmp.Diff(want, c, ptIgnoreAddedAt); diff != "" {
				t.Fatalf("parent %s's entry for child %s (-want +got):\n%s", parent, child, diff)
			}
			if !s.IsKnown(parent, child) {
				t.Fatalf("IsKnown(%s, %s) = false after the spawn", parent, child)
			}
			// The whole registry of the parent is what the model says: the
			// spawn added the child and nothing else.
			if diff := cmp.Diff(m.reg[parent], ptContacts(t, s, parent), ptIgnoreAddedAt); diff != "" {
				t.Fatalf("registry of parent %s (-model +society):\n%s", parent, diff)
			}
		})
		m.check(t, s)
	})
}

// ---------------------------------------------------------------------------
// Property 5: the registry records; under ContactOpen it never refuses.

func TestProperty5_OpenPolicyNeverRefusesUnknownContact(t *testing.T) {
	var unknownSends int
	rapid.Check(t, func(t *rapid.T) {
		s, done := ptOpen(t, as.Config{})
		defer done()
		if s.ContactPolicy() != as.ContactOpen {
			t.Fatalf("default policy %v, want open", s.ContactPolicy())
		}
		m := ptNewModel()
		agents := ptGrowTree(t, s, m, rapid.IntRange(1, 5).Draw(t, "spawns"), nil, nil)
		all := append([]string{as.UserID}, agents...)
		ctx := context.Background()
		for range rapid.IntRange(1, 12).Draw(t, "sends") {
			from, to := ptDrawPair(t, all)
			known := m.knows(from, to)
			if got := s.IsKnown(from, to); got != known {
				t.Fatalf("IsKnown(%s, %s) = %v, want %v", from, to, got, known)
			}
			if !known {
				unknownSends++
			}
			msg, err := ptActor(t, s, from).SendText(ctx, to, "你好")
			if err != nil {
				t.Fatalf("open policy: %s -> %s (known=%v): %v", from, to, known, err)
			}
			if msg.From != from || msg.To != to {
				t.Fatalf("accepted %+v, want from %s to %s", msg, from, to)
			}
			m.sent(from, to)
			// Sending does not make the sender know the receiver.
			if got := s.IsKnown(from, to); got != m.knows(from, to) {
				t.Fatalf("after the send IsKnown(%s, %s) = %v, want %v", from, to, got, m.knows(from, to))
			}
			m.check(t, s)
		}
	})
	if unknownSends == 0 {
		t.Fatal("the generator never sent to an unknown contact")
	}
}

func TestProperty5_StrictPolicyRefusesUnknownContact(t *testing.T) {
	var refused, accepted int
	rapid.Check(t, func(t *rapid.T) {
		rec := ptNewRecorder()
		s, done := ptOpen(t, as.Config{ContactPolicy: as.ContactStrict, Root: rec.behavior()})
		defer done()
		rec.watchUser(s)
		m := ptNewModel()
		agents := ptGrowTree(t, s, m, rapid.IntRange(1, 5).Draw(t, "spawns"), rec.behavior(), nil)
		all := append([]string{as.UserID}, agents...)
		ctx := context.Background()
		for i := range rapid.IntRange(1, 12).Draw(t, "sends") {
			from, to := ptDrawPair(t, all)
			known := m.knows(from, to)
			if got := s.IsKnown(from, to); got != known {
				t.Fatalf("IsKnown(%s, %s) = %v, want %v", from, to, got, known)
			}
			agentsBefore, before := s.Agents(), ptAllContacts(t, s)
			msg, err := ptActor(t, s, from).SendText(ctx, to, fmt.Sprintf("msg %d", i))
			if known || from == as.UserID || to == as.UserID {
				if err != nil {
					t.Fatalf("strict policy: %s -> %s (known=%v) refused: %v", from, to, known, err)
				}
				accepted++
				m.sent(from, to)
				m.check(t, s)
				rec.expect(t, to, msg.ID)
				continue
			}
			refused++
			e := ptWantCode(t, err, as.ErrUnknownContact)
			if e.AgentID != to {
				t.Fatalf("ErrUnknownContact names %q, want %q", e.AgentID, to)
			}
			if diff := cmp.Diff(before, ptAllContacts(t, s)); diff != "" {
				t.Fatalf("a refused send changed registries (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(agentsBefore, s.Agents()); diff != "" {
				t.Fatalf("a refused send changed the agents (-before +after):\n%s", diff)
			}
			// Nothing was queued: a marker from user (always allowed) is the
			// next message the receiver sees.
			marker, err := ptActor(t, s, as.UserID).SendText(ctx, to, "marker")
			if err != nil {
				t.Fatal(err)
			}
			m.sent(as.UserID, to)
			rec.expect(t, to, marker.ID)
		}
	})
	if refused == 0 || accepted == 0 {
		t.Fatalf("the generator refused %d and accepted %d sends; want both", refused, accepted)
	}
}

// ---------------------------------------------------------------------------
// Property 6: preset collaborators.

func TestProperty6_PresetCollaborators(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policy := rapid.SampledFrom([]as.ContactPolicy{as.ContactOpen, as.ContactStrict}).Draw(t, "policy")
		s, done := ptOpen(t, as.Config{ContactPolicy: policy})
		defer done()
		m := ptNewModel()
		agents := ptGrowTree(t, s, m, rapid.IntRange(1, 5).Draw(t, "spawns"), nil, nil)
		parent := rapid.SampledFrom(agents).Draw(t, "parent")

		var candidates []string
		for _, id := range append([]string{as.UserID}, agents...) {
			if id != parent {
				candidates = append(candidates, id)
			}
		}
		var chosen []string
		for _, id := range rapid.Permutation(candidates).Draw(t, "order") {
			if rapid.Bool().Draw(t, "collaborate with "+id) {
				chosen = append(chosen, id)
			}
		}
		var collabs []as.Collaborator
		for _, id := range chosen {
			collabs = append(collabs, as.Collaborator{
				AgentID: id,
				// What the parent calls it; the registry records the real role name.
				Role:        rapid.SampledFrom([]string{"", "UI设计师", "someone"}).Draw(t, "called"),
				Description: rapid.StringOfN(rapid.RuneFrom([]rune("如需界面设计建议可联系此智能体 review")), 0, 20, -1).Draw(t, "description"),
			})
		}
		child := ptSpawnStep(t, s, m, parent, "task-preset", collabs, nil)

		got := ptContacts(t, s, child)
		for _, col := range collabs {
			c, ok := ptFindContact(got, col.AgentID)
			if !ok {
				t.Fatalf("child %s does not know its collaborator %s: %+v", child, col.AgentID, got)
			}
			if c.Source != as.SourcePreset || c.Note != col.Description || c.Role != m.role[col.AgentID] {
				t.Fatalf("entry for collaborator %s: %+v, want source preset, note %q, role %q", col.AgentID, c, col.Description, m.role[col.AgentID])
			}
		}
		m.check(t, s) // exactly [parent, collaborators...] for the child

		ctx := context.Background()
		x := ptActor(t, s, child)
		for _, id := range chosen {
			if !s.IsKnown(child, id) {
				t.Fatalf("IsKnown(%s, %s) = false for a collaborator", child, id)
			}
			if _, err := x.SendText(ctx, id, "你好，我是新来的"); err != nil {
				t.Fatalf("%s policy: child %s cannot message its collaborator %s: %v", policy, child, id, err)
			}
			m.sent(child, id)
		}
		if policy == as.ContactStrict {
			for _, id := range agents {
				if id != parent && !slices.Contains(chosen, id) {
					_, err := x.SendText(ctx, id, "hello?")
					ptWantCode(t, err, as.ErrUnknownContact)
				}
			}
		}
		m.check(t, s)
	})
}

// ---------------------------------------------------------------------------
// Property 7: a first message makes the contact mutual.

func TestProperty7_FirstMessageMakesContactMutual(t *testing.T) {
	var firsts, repeats int
	rapid.Check(t, func(t *rapid.T) {
		s, done := ptOpen(t, as.Config{})
		defer done()
		m := ptNewModel()
		agents := ptGrowTree(t, s, m, rapid.IntRange(1, 5).Draw(t, "spawns"), nil, nil)
		all := append([]string{as.UserID}, agents...)
		ctx := context.Background()
		for range rapid.IntRange(1, 10).Draw(t, "sends") {
			from, to := ptDrawPair(t, all)
			x := ptActor(t, s, from)
			before := ptAllContacts(t, s)
			knew := m.knows(to, from)
			if _, err := x.SendText(ctx, to, "first"); err != nil {
				t.Fatal(err)
			}
			m.sent(from, to)
			m.check(t, s)
			after := ptAllContacts(t, s)
			if knew {
				repeats++
				// An entry already present is not replaced: nothing changes.
				if diff := cmp.Diff(before, after); diff != "" {
					t.Fatalf("%s -> %s, %s already knew %s; registries changed (-before +after):\n%s", from, to, to, from, diff)
				}
			} else {
				firsts++
				c, ok := ptFindContact(after[to], from)
				want := as.Contact{ID: from, Role: m.role[from], InterfaceSpec: m.spec[from], Source: as.SourceFirstMessage}
				if !ok {
					t.Fatalf("after %s's first message, %s does not know it", from, to)
				}
				if diff := cmp.Diff(want, c, ptIgnoreAddedAt); diff != "" {
					t.Fatalf("%s's entry for %s (-want +got):\n%s", to, from, diff)
				}
				// Only the receiver learnt something, one entry.
				before[to] = append(before[to], c)
				if diff := cmp.Diff(before, after); diff != "" {
					t.Fatalf("the first message %s -> %s changed more than one entry (-want +got):\n%s", from, to, diff)
				}
			}
			// A second message adds nothing more.
			if _, err := x.SendText(ctx, to, "second"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(after, ptAllContacts(t, s)); diff != "" {
				t.Fatalf("a second message %s -> %s changed registries (-before +after):\n%s", from, to, diff)
			}
		}
	})
	if firsts == 0 || repeats == 0 {
		t.Fatalf("the generator made %d first messages and %d to known contacts; want both", firsts, repeats)
	}
}

// ---------------------------------------------------------------------------
// Property 8: from is always the sender.

func TestProperty8_FromIsAlwaysTheSender(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rec := ptNewRecorder()
		s, done := ptOpen(t, as.Config{Root: rec.behavior()})
		defer done()
		rec.watchUser(s)
		m := ptNewModel()
		agents := ptGrowTree(t, s, m, rapid.IntRange(1, 4).Draw(t, "spawns"), rec.behavior(), nil)
		all := append([]string{as.UserID}, agents...)
		forgeries := append(slices.Clone(all), "mallory", "", "system")
		ctx := context.Background()
		seen := map[string]bool{}
		var lastSeq uint64
		observe := func(msg as.Message, from, to string) {
			t.Helper()
			if msg.From != from || msg.To != to {
				t.Fatalf("message %s is from %q to %q, want from %q to %q", msg.ID, msg.From, msg.To, from, to)
			}
			if msg.ID == "" || seen[msg.ID] {
				t.Fatalf("message id %q is empty or reused", msg.ID)
			}
			seen[msg.ID] = true
			if msg.Seq <= lastSeq {
				t.Fatalf("message %s has Seq %d after %d", msg.ID, msg.Seq, lastSeq)
			}
			lastSeq = msg.Seq
			if msg.SentAt.IsZero() {
				t.Fatalf("message %s has no SentAt", msg.ID)
			}
		}
		for i := range rapid.IntRange(1, 8).Draw(t, "sends") {
			from, to := ptDrawPair(t, all)
			forged := rapid.SampledFrom(forgeries).Draw(t, "forged from")
			text := fmt.Sprintf("消息 %d", i)
			typ := as.General
			var payload any
			relay := ""
			switch rapid.IntRange(0, 3).Draw(t, "payload kind") {
			case 0:
				payload = map[string]string{"from": forged, "text": text}
			case 1:
				b, _ := json.Marshal(forged)
				payload = json.RawMessage(`{"from":` + string(b) + `,"From":` + string(b) + `,"text":"` + text + `"}`)
			case 2:
				typ = as.StatusReport
				payload = map[string]string{"from": forged, "status": "ok", "text": text}
			case 3:
				// Ask the receiver to forge in its turn, from inside its behaviour.
				if to != as.UserID {
					relay = rapid.SampledFrom(all).Filter(func(id string) bool { return id != to }).Draw(t, "relay to")
				}
				payload = map[string]string{"from": forged, "text": text, "relay_to": relay}
			}
			msg, err := ptActor(t, s, from).Send(ctx, as.Outgoing{To: to, Type: typ, Payload: payload})
			if err != nil {
				t.Fatalf("%s -> %s: %v", from, to, err)
			}
			observe(msg, from, to)
			got := rec.next(t, to)
			if diff := cmp.Diff(msg, got); diff != "" {
				t.Fatalf("delivered message differs from the accepted one (-accepted +delivered):\n%s", diff)
			}
			if relay != "" {
				r := <-rec.relayed
				if r.err != nil {
					t.Fatalf("%s relaying to %s: %v", to, relay, r.err)
				}
				observe(r.m, to, relay)
				got := rec.next(t, relay)
				if diff := cmp.Diff(r.m, got); diff != "" {
					t.Fatalf("delivered relay differs from the accepted one (-accepted +delivered):\n%s", diff)
				}
			}
		}
	})
}

// ---------------------------------------------------------------------------
// Property 9: message presentation (Requirement 10).

func TestProperty9_MessagePresentation(t *testing.T) {
	idGen := rapid.OneOf(
		rapid.StringMatching(`agent-[0-9]{1,4}`),
		rapid.Just(as.RootID),
		rapid.StringMatching(`[a-z][a-z0-9_-]{0,12}`),
	).Filter(func(id string) bool { return id != as.UserID })
	roleGen := rapid.OneOf(rapid.SampledFrom([]string{"程序员", "UI设计师", "root", "unknown", ""}), rapid.String())
	textGen := rapid.OneOf(
		rapid.String(),
		rapid.SampledFrom([]string{"", "\n", "第一行\n第二行\n", "你好，世界", `a'b"c\d`, "<b>&amp;</b>"}),
		rapid.StringOf(rapid.RuneFrom([]rune("计算器你好 \n\tab'\"{}<>&\\"))),
	)
	rapid.Check(t, func(t *rapid.T) {
		role := roleGen.Draw(t, "role")
		text := textGen.Draw(t, "text")
		fromUser := rapid.IntRange(0, 4).Draw(t, "from user?") == 0
		id := as.UserID
		if !fromUser {
			id = idGen.Draw(t, "id")
		}

		// A general message with a text.
		var payload json.RawMessage
		if rapid.Bool().Draw(t, "extra field?") {
			payload, _ = json.Marshal(map[string]string{"text": text, "note": "附加字段"})
		} else {
			payload = as.Text(text)
		}
		m := as.Message{ID: "msg-1", From: id, To: "agent-9", Type: as.General, Payload: payload}
		want := "【来自 " + role + "（" + id + "）的消息】\n" + text + "\n如需回复，请使用 send_message(to='" + id + "', ...)"
		if fromUser {
			want = "【来自用户的消息】\n" + text
		}
		if got := as.FormatMessage(m, role); got != want {
			t.Fatalf("FormatMessage(%+v, %q) =\n%q\nwant\n%q", m, role, got, want)
		}

		// A typed message without a text shows its structured fields.
		typ := rapid.SampledFrom(as.MessageTypes()[:len(as.MessageTypes())-1]).Draw(t, "type")
		keys := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"reason", "required_capability", "status", "subtask_description", "request_id", "advice", "target_agent_id", "error_message"}), 1, 4, rapid.ID[string]).Draw(t, "keys")
		fields := map[string]string{}
		for _, k := range keys {
			fields[k] = rapid.StringOfN(rapid.RuneFrom([]rune("需要前端开发计算器abcXYZ0123 -")), 1, 12, -1).Draw(t, k)
		}
		raw, _ := json.Marshal(fields)
		tm := as.Message{ID: "msg-2", From: id, To: "agent-9", Type: typ, Payload: raw}
		got := as.FormatMessage(tm, role)
		head, hint := "【来自 "+role+"（"+id+"）的消息】\n", "\n如需回复，请使用 send_message(to='"+id+"', ...)"
		if fromUser {
			head, hint = "【来自用户的消息】\n", ""
		}
		if !strings.HasPrefix(got, head) || !strings.HasSuffix(got, hint) {
			t.Fatalf("FormatMessage(%s message) =\n%q\nwant it to start with %q and end with %q", typ, got, head, hint)
		}
		if fromUser && strings.Contains(got, "如需回复") {
			t.Fatalf("a message from user has a reply hint:\n%q", got)
		}
		content := strings.TrimSuffix(strings.TrimPrefix(got, head), hint)
		for k, v := range fields {
			if !strings.Contains(content, k) || !strings.Contains(content, v) {
				t.Fatalf("the content of a %s message lacks field %s = %q:\n%s", typ, k, v, content)
			}
		}
	})
}

// ---------------------------------------------------------------------------
// Property 10: payloads are checked against their message type.

// ptP10Case is one generated message with what the spec says of it.
type ptP10Case struct {
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

type ptFieldState int

const (
	ptAbsent ptFieldState = iota
	ptBlankField
	ptPresent
	ptWrongTypeField
)

var ptWrongType = rapid.SampledFrom([]any{42, true, nil, []any{"x"}, map[string]any{"text": "x"}})

// ptDrawField sets obj[name] to an absent, blank, present (from present) or
// wrongly typed value; with wantValid it is always present. It reports
// whether the field holds a non-blank string.
func ptDrawField(t *rapid.T, obj map[string]any, name string, wantValid bool, states []ptFieldState, present func() any) bool {
	st := ptPresent
	if !wantValid {
		st = rapid.SampledFrom(states).Draw(t, name+".state")
	}
	switch st {
	case ptBlankField:
		obj[name] = ptBlank.Draw(t, name+".blank")
	case ptPresent:
		obj[name] = present()
	case ptWrongTypeField:
		obj[name] = ptWrongType.Draw(t, name+".wrong")
	}
	return st == ptPresent
}

var ptAllStates = []ptFieldState{ptAbsent, ptBlankField, ptPresent, ptWrongTypeField}

func ptDrawP10(t *rapid.T, typ as.MessageType, targets []string, newRequestID func() string) ptP10Case {
	c := ptP10Case{typ: typ}
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
		states := []ptFieldState{ptAbsent, ptBlankField, ptPresent}
		str := func(name string) {
			ok := ptDrawField(t, obj, name, wantValid, states, text(name))
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
		status := ptDrawField(t, obj, "status", false, ptAllStates, text("status"))
		txt := ptDrawField(t, obj, "text", false, ptAllStates, text("text"))
		if wantValid && !status && !txt {
			obj["status"] = "进行中"
			status = true
		}
		need("status", status || txt)
	case as.IntroductionRequest:
		need("reason", ptDrawField(t, obj, "reason", wantValid, ptAllStates, text("reason")))
		need("required_capability", ptDrawField(t, obj, "required_capability", wantValid, ptAllStates, text("required_capability")))
	case as.IntroductionResponse:
		need("target_agent_id", ptDrawField(t, obj, "target_agent_id", wantValid, ptAllStates, func() any {
			return rapid.SampledFrom(targets).Draw(t, "target")
		}))
		if rapid.Bool().Draw(t, "advice?") {
			obj["advice"] = "找他做代码评审"
		}
		if rapid.Bool().Draw(t, "fake role?") {
			obj["target_role"] = "假角色"
			obj["target_interface_spec"] = map[string]any{"services": "fake"}
		}
	case as.CollaborationRequest:
		need("subtask_description", ptDrawField(t, obj, "subtask_description", wantValid, ptAllStates, text("subtask_description")))
		rid := ptAbsent
		if !wantValid {
			rid = rapid.SampledFrom(ptAllStates).Draw(t, "request_id.state")
		} else if rapid.Bool().Draw(t, "request_id?") {
			rid = ptPresent
		}
		switch rid {
		case ptBlankField:
			obj["request_id"] = ptBlank.Draw(t, "request_id.blank")
		case ptPresent:
			obj["request_id"] = newRequestID()
		case ptWrongTypeField:
			// null reads as absent; a number or a list is a malformed id.
			obj["request_id"] = rapid.SampledFrom([]any{7, []any{"r"}}).Draw(t, "request_id.wrong")
		}
		if rapid.Bool().Draw(t, "context?") {
			obj["context"] = map[string]any{"artifact": "artifact:a-1"}
		}
		c.valid = len(c.missing) == 0 && (rid == ptAbsent || rid == ptPresent)
		c.payload = obj
		return c
	case as.CollaborationResponse:
		ridOK := ptDrawField(t, obj, "request_id", wantValid, ptAllStates, func() any {
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
			obj["status"] = ptBlank.Draw(t, "status.blank")
			need("status", false)
		case "wrong":
			obj["status"] = ptWrongType.Draw(t, "status.wrong")
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
			need("error_message", ptDrawField(t, obj, "error_message", wantValid, ptAllStates, text("error_message")))
		default:
			obj["status"] = status
			bogus = true
		}
		c.valid = len(c.missing) == 0 && !bogus
		c.payload = obj
		return c
	}
	c.valid = len(c.missing) == 0
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
		rec := ptNewRecorder()
		s, done := ptOpen(t, as.Config{})
		defer done()
		ctx := context.Background()
		root := ptActor(t, s, as.RootID)
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
		sender, receiver := ptActor(t, s, a), ptActor(t, s, c)
		n := 0
		newRequestID := func() string {
			n++
			return fmt.Sprintf("req-p10-%d", n)
		}

		var accepted []string
		for range rapid.IntRange(1, 8).Draw(t, "messages") {
			typ := rapid.SampledFrom(as.MessageTypes()).Draw(t, "type")
			pc := ptDrawP10(t, typ, targets, newRequestID)
			if pc.request != "" {
				if _, err := receiver.Send(ctx, as.Outgoing{To: a, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: pc.request, SubtaskDescription: "做个子任务"}}); err != nil {
					t.Fatalf("setting up request %s: %v", pc.request, err)
				}
			}
			agentsBefore, before := s.Agents(), ptAllContacts(t, s)
			msg, err := sender.Send(ctx, as.Outgoing{To: c, Type: typ, Payload: pc.payload})
			if pc.valid {
				counts[typ].valid++
				if err != nil {
					t.Fatalf("%s with payload %s refused: %v", typ, ptShow(pc.payload), err)
				}
				if msg.Type != typ || msg.From != a || msg.To != c {
					t.Fatalf("accepted %+v, want a %s from %s to %s", msg, typ, a, c)
				}
				accepted = append(accepted, msg.ID)
				continue
			}
			counts[typ].invalid++
			if err == nil {
				t.Fatalf("%s with payload %s accepted, want invalid_message_format (missing %v)", typ, ptShow(pc.payload), pc.missing)
			}
			e := ptWantCode(t, err, as.ErrInvalidMessageFormat)
			if e.MessageType != typ {
				t.Fatalf("refusal of %s names message type %q", typ, e.MessageType)
			}
			if diff := cmp.Diff(pc.missing, e.MissingFields, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("%s with payload %s: MissingFields (-want +got):\n%s", typ, ptShow(pc.payload), diff)
			}
			if diff := cmp.Diff(before, ptAllContacts(t, s)); diff != "" {
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

func ptShow(payload any) string {
	if raw, ok := payload.(json.RawMessage); ok {
		return string(raw)
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Sprintf("%#v", payload)
	}
	return string(b)
}
