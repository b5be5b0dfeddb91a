package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/examples/internal/exampletest"
	"agentsociety/internal/demo"
)

// TestQuickstart plays the scenario on the demo model and checks what the
// society made of it: the organisation, the contacts, the artifact, the
// answer to the user and the constraints passed down.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	model := demo.Model()
	var out bytes.Buffer
	s, reply, err := play(ctx, &out, model)
	if s != nil {
		defer s.Close(context.Background())
	}
	if err != nil {
		t.Fatalf("play: %v\n--- output ---\n%s", err, out.String())
	}
	// The society is still open, so its agents may still be ending their
	// turns: close it before reading the output they write.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	printed := out.String()
	defer func() {
		if t.Failed() {
			t.Logf("--- output ---\n%s", printed)
		}
	}()

	// The organisation: exactly root → lead → {tester, developer}.
	agents := s.Agents()
	if len(agents) != 3 {
		t.Fatalf("the society has %d agents, want 3: %+v", len(agents), agents)
	}
	byRole := map[string]as.Agent{}
	roleOf := map[string]as.Role{}
	for _, a := range agents {
		r, ok := s.Role(a.RoleID)
		if !ok {
			t.Fatalf("agent %s has no role %q", a.ID, a.RoleID)
		}
		byRole[r.Name], roleOf[a.ID] = a, r
	}
	lead, tester, dev := byRole["lead"], byRole["tester"], byRole["developer"]
	if lead.ID == "" || tester.ID == "" || dev.ID == "" {
		t.Fatalf("roles of the agents: %v", roleOf)
	}
	if lead.ParentID != as.RootID || tester.ParentID != lead.ID || dev.ParentID != lead.ID {
		t.Errorf("parents: lead %s, tester %s, developer %s", lead.ParentID, tester.ParentID, dev.ParentID)
	}
	if got := len(s.Roles()); got != 3 {
		t.Errorf("%d roles, want 3", got)
	}
	if by := roleOf[lead.ID].CreatedBy; by != as.RootID {
		t.Errorf("the lead role was created by %s, want root", by)
	}
	for _, a := range []as.Agent{tester, dev} {
		if by := roleOf[a.ID].CreatedBy; by != lead.ID {
			t.Errorf("the %s role was created by %s, want the lead %s", roleOf[a.ID].Name, by, lead.ID)
		}
	}
	if roleOf[tester.ID].InterfaceSpec == nil {
		t.Error("the tester role has no interface spec")
	}
	if lead.TaskID == "" || tester.TaskID != lead.TaskID || dev.TaskID != lead.TaskID {
		t.Errorf("tasks: lead %q, tester %q, developer %q", lead.TaskID, tester.TaskID, dev.TaskID)
	}

	// The contacts, and how each was made.
	source := func(owner, id string) as.ContactSource {
		cs, err := s.Contacts(owner)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.ID == id {
				return c.Source
			}
		}
		return ""
	}
	for _, c := range []struct {
		owner, id string
		want      as.ContactSource
	}{
		{dev.ID, tester.ID, as.SourcePreset},
		{dev.ID, lead.ID, as.SourceParent},
		{tester.ID, dev.ID, as.SourceFirstMessage},
		{lead.ID, tester.ID, as.SourceChild},
		{lead.ID, dev.ID, as.SourceChild},
		{as.UserID, lead.ID, as.SourceFirstMessage},
	} {
		if got := source(c.owner, c.id); got != c.want {
			t.Errorf("%s knows %s from %q, want %q", c.owner, c.id, got, c.want)
		}
	}

	// The answer: from the lead, on the task, with the artifact's reference.
	if reply.From != lead.ID || reply.TaskID != lead.TaskID {
		t.Errorf("the user's answer came from %s on task %s", reply.From, reply.TaskID)
	}
	ref := regexp.MustCompile(`artifact:[A-Za-z0-9-]+`).FindString(reply.Text())
	if ref == "" {
		t.Fatalf("the answer names no artifact: %q", reply.Text())
	}
	art, data, err := s.GetArtifact(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if art.MediaType != "text/html" || art.CreatedBy != dev.ID || !strings.Contains(string(data), "<script>") {
		t.Errorf("artifact %s: %s by %s, %d bytes", ref, art.MediaType, art.CreatedBy, len(data))
	}

	// The constraints came down from the user through root and the lead: the
	// developer's very first model call has them in its brief, the
	// task_assignment from the lead that opens its history, and its system
	// prompt lists the tester its brief presets.
	reqs := model.RequestsFor(dev.ID)
	if len(reqs) == 0 || len(reqs[0].Messages) == 0 {
		t.Fatal("the developer never called the model")
	}
	first := reqs[0].Messages[0].Content
	if !strings.HasPrefix(first, "【来自 lead（"+lead.ID+"）的消息】\nmessage_type: task_assignment\n") {
		t.Errorf("the developer's first message is not its brief from the lead:\n%s", first)
	}
	for _, want := range []string{"HTML + JavaScript", "static page", "静态网页，无后端", tester.ID + " (tester)"} {
		if !strings.Contains(first, want) {
			t.Errorf("the developer's brief lacks %q:\n%s", want, first)
		}
	}
	if want := tester.ID + "（tester，preset）"; !strings.Contains(reqs[0].System, want) {
		t.Errorf("the developer's first system prompt lacks %q:\n%s", want, reqs[0].System)
	}
	if strings.Contains(reqs[0].System, "static page") {
		t.Error("the developer's system prompt repeats its brief")
	}
	// The lead's brief carries the constraints and the requirement itself:
	// root sends it nothing else.
	leadReqs := model.RequestsFor(lead.ID)
	if len(leadReqs) == 0 || len(leadReqs[0].Messages) != 1 {
		t.Fatal("the lead did not start on its brief alone")
	}
	for _, want := range []string{"【来自 root（root）的消息】\nmessage_type: task_assignment\n", "  - HTML + JavaScript\n  - 静态网页，无后端\n", "inputs: 用户需求原文：" + demo.Requirement + "\n"} {
		if !strings.Contains(leadReqs[0].Messages[0].Content, want) {
			t.Errorf("the lead's brief lacks %q:\n%s", want, leadReqs[0].Messages[0].Content)
		}
	}
	if n := len(model.RequestsFor(as.RootID)); n != 2 {
		t.Errorf("root called the model %d times, want 2 (create_role, then spawn_agent with end_turn)", n)
	}

	// What was printed: every delivered message with its Requirement 10
	// source line, and the organisation.
	for _, want := range []string{
		"── root receives ──\n【来自用户的消息】\n" + demo.Requirement + "\n",
		"【来自 root（root）的消息】\n",
		"【来自 lead（" + lead.ID + "）的消息】\n",
		"【来自 developer（" + dev.ID + "）的消息】\n",
		"【来自 tester（" + tester.ID + "）的消息】\n",
		"── user receives ──\n【来自 lead（" + lead.ID + "）的消息】\n",
		"如需回复，请使用 send_message(to='" + dev.ID + "', ...)",
		dev.ID + " calls put_artifact",
		tester.ID + " calls get_artifact",
		"root\n└─ " + lead.ID + " (lead) " + lead.TaskID + "\n   ├─ " + tester.ID + " (tester)\n   └─ " + dev.ID + " (developer)\n",
	} {
		if !strings.Contains(printed, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if strings.Contains(printed, "演示脚本") {
		t.Error("the script met a step it has no rule for, or a tool failed")
	}
	if strings.Contains(printed, "level=") {
		t.Error("the society logged a warning or an error")
	}
}

// TestRun runs the program as main does, on the demo model.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, demo.Model()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "══ organisation\nroot\n└─ ") {
		t.Errorf("no organisation printed:\n%s", out.String())
	}
}

// TestRunModelUnreachable checks that the program stops at once with the
// model's failure when the model refuses every call, rather than waiting
// out its deadline (5 minutes on a real model).
func TestRunModelUnreachable(t *testing.T) {
	exampletest.ModelUnreachable(t, run)
}
