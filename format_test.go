package agentsociety_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	as "agentsociety"

	"pgregory.net/rapid"
)

// TestRewrittenPayloadsKeepHTMLReadable checks that a payload the society
// rewrites (a collaboration request gets its request_id) still shows "<" and
// "&" as written, not as JSON's HTML escapes.
func TestRewrittenPayloadsKeepHTMLReadable(t *testing.T) {
	ctx := context.Background()
	got := make(chan as.Message, 1)
	s := newSociety(t, as.Config{DefaultBehavior: as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		got <- m
		return nil
	})})
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "dev"})
	child, _, err := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Send(ctx, as.Outgoing{To: child.ID, Type: as.CollaborationRequest,
		Payload: as.CollaborationRequestPayload{SubtaskDescription: "check <script> & a > b"}}); err != nil {
		t.Fatal(err)
	}
	if text := s.Format(recv(t, got, "the delivery")); !strings.Contains(text, "check <script> & a > b") {
		t.Fatalf("the receiver reads:\n%s", text)
	}
}

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
