package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/examples/internal/exampletest"
	"agentsociety/examples/internal/show"
	"agentsociety/internal/script"
	"agentsociety/llm"
	"agentsociety/llm/openai"
)

// TestThesisPR plays seed 004's flow on the scripted model and checks what
// the society made of it: the team and who created it, the project and
// private state and their writers, the two delegations as the delegator saw
// them, the archived PR file, what the user was told, and the tools each
// role was offered.
func TestThesisPR(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	model := Model()
	var out bytes.Buffer
	start := time.Now()
	o, err := play(ctx, &out, model)
	printed := out.String()
	defer func() {
		if t.Failed() {
			t.Logf("--- output ---\n%s", printed)
		}
	}()
	if err != nil {
		t.Fatalf("play: %v", err)
	}
	t.Logf("the flow took %v and %d model calls", time.Since(start), model.Calls())
	s := o.s

	// The team: root → Academic Partner → {Literature Agent, PR Manager,
	// Archivist}, each on a role its parent created, all on one task.
	agents := s.Agents()
	if len(agents) != 4 {
		t.Fatalf("the society has %d agents, want 4: %+v", len(agents), agents)
	}
	byRole := map[string]as.Agent{}
	for _, a := range agents {
		r, ok := s.Role(a.RoleID)
		if !ok {
			t.Fatalf("agent %s has no role %q", a.ID, a.RoleID)
		}
		byRole[r.Name] = a
		want := a.ParentID
		if r.CreatedBy != want {
			t.Errorf("role %q was created by %s; its agent's parent is %s", r.Name, r.CreatedBy, want)
		}
	}
	ap, lit, prm, arc := byRole[roleAcademicPartner], byRole[roleLiteratureAgent], byRole[rolePRManager], byRole[roleArchivist]
	if ap.ID == "" || lit.ID == "" || prm.ID == "" || arc.ID == "" {
		t.Fatalf("roles of the agents: %v", byRole)
	}
	if ap.ParentID != as.RootID {
		t.Errorf("the Academic Partner's parent is %s, want root", ap.ParentID)
	}
	for _, a := range []as.Agent{lit, prm, arc} {
		if a.ParentID != ap.ID {
			t.Errorf("agent %s's parent is %s, want the Academic Partner %s", a.ID, a.ParentID, ap.ID)
		}
		if a.TaskID != o.task {
			t.Errorf("agent %s works on %q, want %q", a.ID, a.TaskID, o.task)
		}
		if !slices.Contains(a.Brief.Constraints, "不直接修改 Draft.md，通过 Archivist 执行") {
			t.Errorf("agent %s's brief lost the user's constraints: %q", a.ID, a.Brief.Constraints)
		}
	}
	var names []string
	for _, r := range s.Roles() {
		names = append(names, r.Name)
	}
	if want := []string{roleAcademicPartner, roleLiteratureAgent, rolePRManager, roleArchivist}; !slices.Equal(names, want) {
		t.Errorf("roles %q, want %q", names, want)
	}

	// The project state: the keys, who wrote each, and what it holds.
	st, err := o.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	project, private := map[string]string{}, map[string]string{}
	for _, e := range st.States {
		switch e.Scope {
		case "task:" + o.task:
			project[e.Key] = e.Writer
		case "agent:" + lit.ID, "agent:" + prm.ID:
			private[e.Scope+" "+e.Key] = e.Writer
		default:
			t.Errorf("unexpected state %s %s by %s", e.Scope, e.Key, e.Writer)
		}
	}
	wantProject := map[string]string{
		"pr_id": ap.ID, "pr_status": ap.ID, "modification_spec": ap.ID, "open_issues": ap.ID,
		"checklist": prm.ID, // the Academic Partner wrote it; the PR Manager wrote its results back
	}
	if !equalMaps(project, wantProject) {
		t.Errorf("project state writers %v, want %v", project, wantProject)
	}
	wantPrivate := map[string]string{"agent:" + lit.ID + " reading_progress": lit.ID, "agent:" + prm.ID + " validation_notes": prm.ID}
	if !equalMaps(private, wantPrivate) {
		t.Errorf("private state writers %v, want %v", private, wantPrivate)
	}
	// Through the library's API, as any agent of the task sees it.
	archivist, err := s.Actor(arc.ID)
	if err != nil {
		t.Fatal(err)
	}
	var sp spec
	readState(t, archivist, "modification_spec", as.ScopeProject, ap.ID, &sp)
	if sp.PRID != "PR-0010" || sp.OriginalText != specOriginal || len(sp.RequiredCitations) != 1 || !strings.Contains(sp.RequiredCitations[0], "[J]") {
		t.Errorf("modification_spec %+v", sp)
	}
	var checklist map[string]string
	readState(t, archivist, "checklist", as.ScopeProject, prm.ID, &checklist)
	if len(checklist) != 10 || checklist["1_read_pr"] != "pass" || checklist["2_read_original"] != "blocked" || checklist["10_update_status"] != "pending" {
		t.Errorf("checklist %v", checklist)
	}
	var status string
	readState(t, archivist, "pr_status", as.ScopeProject, ap.ID, &status)
	if status != "blocked" {
		t.Errorf("pr_status %q", status)
	}
	if _, ok, _ := archivist.GetState("reading_progress", as.ScopePrivate); ok {
		t.Error("the Archivist reads the Literature Agent's private state")
	}
	// The other agents read what the Academic Partner wrote with state_get.
	for _, a := range []as.Agent{lit, prm, arc} {
		if !toolResultHas(model.RequestsFor(a.ID), `"key":"modification_spec"`, `"writer":"`+ap.ID+`"`) {
			t.Errorf("agent %s never read the modification_spec written by %s", a.ID, ap.ID)
		}
	}

	// The delegations, as the society recorded them: two, from the
	// Academic Partner; one completed, one failed.
	var outcomes []string
	for _, r := range st.Requests {
		outcomes = append(outcomes, r.From+"→"+r.To+" "+r.Status)
	}
	slices.Sort(outcomes)
	want := []string{ap.ID + "→" + lit.ID + " " + string(as.StatusCompleted), ap.ID + "→" + prm.ID + " " + string(as.StatusError)}
	slices.Sort(want)
	if !slices.Equal(outcomes, want) {
		t.Errorf("requests %q, want %q", outcomes, want)
	}
	// And as the delegator saw them: one collaboration_response of each.
	seen := map[string]script.Message{}
	for _, req := range model.RequestsFor(ap.ID) {
		for _, m := range req.Messages {
			if m.Role == llm.RoleUser {
				if pm := script.ParseMessage(m.Content); pm.Type == string(as.CollaborationResponse) {
					seen[m.Content] = pm
				}
			}
		}
	}
	var completed, failed []script.Message
	for _, m := range seen {
		switch m.Payload["status"] {
		case string(as.StatusCompleted):
			completed = append(completed, m)
		case string(as.StatusError):
			failed = append(failed, m)
		default:
			t.Errorf("the Academic Partner got a %v response", m.Payload["status"])
		}
	}
	if len(completed) != 1 || len(failed) != 1 {
		t.Fatalf("the Academic Partner got %d completed and %d failed outcomes, want 1 and 1", len(completed), len(failed))
	}
	var n notes
	if err := remarshal(completed[0].Payload["result_data"], &n); err != nil || completed[0].From != lit.ID || len(n.ReadingNotes.QuotablePassages) == 0 || n.SuggestedCitation == "" {
		t.Errorf("the completed outcome: from %s, notes %+v (%v)", completed[0].From, n, err)
	}
	f := failed[0]
	var esc escalation
	remarshal(f.Payload["result_data"], &esc)
	if msg, _ := f.Payload["error_message"].(string); f.From != prm.ID || !strings.HasPrefix(msg, "[OPEN] ") ||
		esc.Type != "ESCALATION" || esc.RequiredAction == "" || !slices.Contains(esc.BlockedItems, "2_read_original") || esc.ClosestMatch == nil {
		t.Errorf("the failed outcome: from %s, %q, details %+v", f.From, f.Payload["error_message"], esc)
	}

	// The final artifact: the PR file, stored by the Archivist, the same as
	// the file it wrote; the draft untouched.
	rep := o.report
	if rep.From != ap.ID || rep.TaskID != o.task || o.ref == "" || !strings.Contains(rep.Text(), o.ref) || !strings.Contains(rep.Text(), "[OPEN]") {
		t.Errorf("the final report from %s on %s names %q: %q", rep.From, rep.TaskID, o.ref, rep.Text())
	}
	art, data, err := s.GetArtifact(ctx, o.ref)
	if err != nil {
		t.Fatal(err)
	}
	file, _ := o.ws.file("PR/PR-0010.md")
	if art.CreatedBy != arc.ID || art.Name != "PR-0010.md" || art.MediaType != "text/markdown" || string(data) != file {
		t.Errorf("artifact %s: %s %s by %s; content matches the PR file: %v", o.ref, art.Name, art.MediaType, art.CreatedBy, string(data) == file)
	}
	for _, want := range []string{"- 状态：blocked", "- 2_read_original：blocked", "[OPEN] ", "[J]"} {
		if !strings.Contains(file, want) {
			t.Errorf("the PR file lacks %q:\n%s", want, file)
		}
	}
	if d, _ := o.ws.file(draftPath); d != draft {
		t.Error("Draft.md was changed")
	}
	if idx, _ := o.ws.file(indexPath); !strings.Contains(idx, "- PR/PR-0010.md（blocked）") {
		t.Errorf("_CONTEXT.md: %q", idx)
	}
	if pr, ok := o.ws.pr("PR-0010"); !ok || pr.CreatedBy != ap.ID {
		t.Errorf("the PR registry has %+v", pr)
	}

	// The tools each agent was offered: its role's own, and the delegation
	// and state tools only for the team.
	for _, c := range []struct {
		id       string
		has, not []string
	}{
		{as.RootID, []string{"spawn_agent"}, []string{"create_pr", "delegate_task", "state_get", "search_in_literature"}},
		{ap.ID, []string{"create_pr", "delegate_task", "state_set"}, []string{"search_in_literature", "diff_draft", "create_file"}},
		{lit.ID, []string{"search_in_literature", "read_literature", "complete_task", "state_get"}, []string{"create_pr", "diff_draft", "create_file"}},
		{prm.ID, []string{"validate_spec", "diff_draft", "read_file", "fail_task"}, []string{"create_pr", "search_in_literature", "create_file"}},
		{arc.ID, []string{"create_file", "sync_index", "read_file", "state_get"}, []string{"create_pr", "diff_draft", "validate_spec"}},
	} {
		reqs := model.RequestsFor(c.id)
		if len(reqs) == 0 {
			t.Errorf("%s never called the model", c.id)
			continue
		}
		var tools []string
		for _, tl := range reqs[0].Tools {
			tools = append(tools, tl.Name)
		}
		for _, name := range c.has {
			if !slices.Contains(tools, name) {
				t.Errorf("%s is not offered %s: %q", c.id, name, tools)
			}
		}
		for _, name := range c.not {
			if slices.Contains(tools, name) {
				t.Errorf("%s is offered %s", c.id, name)
			}
		}
	}

	// What was printed: the messages as delivered, with their source lines,
	// the escalation to user before the final report, and the summary.
	for _, want := range []string{
		"── root receives ──\n【来自用户的消息】\n" + Requirement + "\n",
		"── " + ap.ID + " (Academic Partner) receives ──\n【来自 root（root）的消息】\n",
		"── " + lit.ID + " (Literature Agent) receives ──\n【来自 Academic Partner（" + ap.ID + "）的消息】\nmessage_type: collaboration_request\n",
		"── " + ap.ID + " (Academic Partner) receives ──\n【来自 Literature Agent（" + lit.ID + "）的消息】\nmessage_type: collaboration_response\n",
		"── " + ap.ID + " (Academic Partner) receives ──\n【来自 PR Manager（" + prm.ID + "）的消息】\nmessage_type: collaboration_response\n",
		"── " + ap.ID + " (Academic Partner) receives ──\n【来自 Archivist（" + arc.ID + "）的消息】\n",
		lit.ID + " calls complete_task ",
		prm.ID + " calls fail_task ",
		arc.ID + " calls put_artifact ",
		"root\n└─ " + ap.ID + " (Academic Partner) " + o.task + "\n   ├─ " + lit.ID + " (Literature Agent)\n   ├─ " + prm.ID + " (PR Manager)\n   └─ " + arc.ID + " (Archivist)\n",
		"  Literature Agent   role-2, created by " + ap.ID + " (Academic Partner)\n",
		"  checklist, written by " + prm.ID + " (PR Manager):\n",
		"  modification_spec, written by " + ap.ID + " (Academic Partner):\n",
		": " + ap.ID + " (Academic Partner) → " + lit.ID + " (Literature Agent): completed\n",
		": " + ap.ID + " (Academic Partner) → " + prm.ID + " (PR Manager): error\n",
		"══ final artifact\n  " + o.ref + "  PR-0010.md, text/markdown, ",
	} {
		if !strings.Contains(printed, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	// root briefs the Academic Partner with the requirement and sends it
	// nothing else: two model calls, the spawn ending the turn.
	if n := len(model.RequestsFor(as.RootID)); n != 2 {
		t.Errorf("root called the model %d times, want 2", n)
	}
	if reqs := model.RequestsFor(ap.ID); len(reqs) == 0 || len(reqs[0].Messages) != 1 ||
		!strings.Contains(reqs[0].Messages[0].Content, "message_type: task_assignment\n") ||
		!strings.Contains(reqs[0].Messages[0].Content, "inputs: 用户需求原文："+strings.SplitN(Requirement, "\n", 2)[0]) {
		t.Error("the Academic Partner did not start on its brief carrying the requirement")
	}
	if strings.Contains(printed, "演示脚本") {
		t.Error("the script met a step it has no rule for, or a tool failed")
	}
	toUser := "── user receives ──\n【来自 Academic Partner（" + ap.ID + "）的消息】\n"
	escalated := strings.Index(printed, toUser+"【升级】PR-0010 ")
	reported := strings.Index(printed, toUser+"PR-0010 的 PR 文件已由 Archivist（"+arc.ID+"）归档："+o.ref)
	if escalated < 0 || reported < 0 || escalated > reported {
		t.Errorf("the user's messages: escalation at %d, final report at %d", escalated, reported)
	}
	if strings.Contains(printed, "level=") {
		t.Error("the society logged a warning or an error")
	}
}

// TestRun runs the program as main does, on the scripted model.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, Model()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "══ final artifact\n  artifact:") {
		t.Errorf("no final artifact printed:\n%s", out.String())
	}
}

// TestModelFlag checks how the model is picked: the environment makes it
// real unless -real=false says otherwise.
func TestModelFlag(t *testing.T) {
	t.Setenv(openai.EnvAPIKey, "")
	t.Setenv(openai.EnvBaseURL, "")
	for _, c := range []struct {
		env  string
		args []string
		real bool
	}{
		{"", nil, false},
		{"", []string{"-real"}, true},
		{"sk-test", nil, true},
		{"sk-test", []string{"-real=false"}, false},
	} {
		t.Setenv(openai.EnvAPIKey, c.env)
		fs := flag.NewFlagSet("thesis-pr", flag.ContinueOnError)
		pick := show.ModelFlag(fs, "the scripted model", Model)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		m, isReal, err := pick()
		if c.real && c.env == "" {
			if err == nil {
				t.Errorf("env %q args %q: a real model without a key or URL", c.env, c.args)
			}
			continue
		}
		if err != nil || isReal != c.real {
			t.Errorf("env %q args %q: real %v, err %v", c.env, c.args, isReal, err)
		}
		if _, scripted := m.(interface{ Calls() int }); scripted == c.real {
			t.Errorf("env %q args %q: got %T", c.env, c.args, m)
		}
	}
}

// TestTools checks the host tools on the cases the flow does not reach: a
// located change, a citation that is not GB/T 7714, a second PR.
func TestTools(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace()
	byName := map[string]as.Tool{}
	for _, tl := range w.tools() {
		byName[tl.Name] = tl
	}
	callTool := func(name string, args any) map[string]any {
		t.Helper()
		b, _ := json.Marshal(args)
		out, err := byName[name].Handler(ctx, nil, b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var m map[string]any
		remarshal(out, &m)
		return m
	}

	d := callTool("diff_draft", map[string]string{"file": draftPath, "original_text": "1995 年至 2009 年", "target_text": "1997 年至 2012 年"})
	if d["applicable"] != true || d["line"] != float64(10) || !strings.Contains(d["diff"].(string), "+ Z 世代通常指 1997 年至 2012 年间") {
		t.Errorf("diff_draft on a present text: %v", d)
	}
	d = callTool("diff_draft", map[string]string{"file": draftPath, "original_text": "Z 世代", "target_text": "x"})
	if d["applicable"] != false || !strings.Contains(d["reason"].(string), "多次") {
		t.Errorf("diff_draft on an ambiguous text: %v", d)
	}

	v := callTool("validate_spec", map[string]any{"spec": map[string]any{
		"original_text": "a", "target_text": "b", "acceptance_criteria": []string{"c"}, "required_citations": []string{"Schroth 2019"},
	}})
	if v["complete"] != false || !strings.Contains(encodeString(v["missing_items"]), "GB/T 7714") {
		t.Errorf("validate_spec on a loose citation: %v", v)
	}
	v = callTool("validate_spec", map[string]any{"spec": map[string]any{}})
	if want := `["original_text","target_text","acceptance_criteria","required_citations"]`; encodeString(v["missing_items"]) != want {
		t.Errorf("validate_spec on an empty spec: %v", v)
	}

	if _, err := byName["create_file"].Handler(ctx, nil, json.RawMessage(`{"path":"Draft.md","content":"x"}`)); err == nil {
		t.Error("create_file overwrote Draft.md")
	}
	s := callTool("search_in_literature", map[string]string{"path": literaturePath, "query": "管理者"})
	if s["count"] != float64(1) || !strings.Contains(s["title"].(string), "[J]") {
		t.Errorf("search_in_literature: %v", s)
	}
}

// TestParseMessage pins the script's reading of messages to the society's
// own formatting, so that a change there shows up here rather than as a
// stalled flow.
func TestParseMessage(t *testing.T) {
	payload, _ := json.Marshal(as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusError, ErrorMessage: "[OPEN] x", ResultData: json.RawMessage(`{"type":"ESCALATION"}`)})
	m := script.ParseMessage(as.FormatMessage(as.Message{From: "agent-3", To: "agent-1", Type: as.CollaborationResponse, Payload: payload}, rolePRManager))
	if m.From != "agent-3" || m.FromRole != rolePRManager || m.Type != "collaboration_response" || m.Payload["error_message"] != "[OPEN] x" {
		t.Errorf("read %+v", m)
	}
	if partnerKind(m) != "escalation" {
		t.Errorf("an error response reads as %q", partnerKind(m))
	}
	system := "## 联系人\n- root（root，parent）\n- 子级（Literature Agent）：已汇报 agent-2\n- 子级（PR Manager）：未汇报 agent-3\n- 子级（Archivist）：未汇报 agent-4"
	if got := script.ContactWithRole(system, rolePRManager); got != "agent-3" {
		t.Errorf("ContactWithRole: %q", got)
	}
}

func encodeString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// readState reads key through x, checks its writer and decodes it into v.
func readState(t *testing.T, x *as.Actor, key string, scope as.StateScope, writer string, v any) {
	t.Helper()
	sv, ok, err := x.GetState(key, scope)
	if err != nil || !ok {
		t.Fatalf("GetState(%q, %s): ok %v, %v", key, scope, ok, err)
	}
	if sv.Writer != writer {
		t.Errorf("%s was written by %s, want %s", key, sv.Writer, writer)
	}
	if err := json.Unmarshal(sv.Value, v); err != nil {
		t.Errorf("%s: %v", key, err)
	}
}

// toolResultHas reports whether some tool result in reqs contains every one
// of the strings.
func toolResultHas(reqs []llm.Request, strs ...string) bool {
	for _, req := range reqs {
		for _, m := range req.Messages {
			if m.Role != llm.RoleTool {
				continue
			}
			ok := true
			for _, s := range strs {
				ok = ok && strings.Contains(m.Content, s)
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// TestRunModelUnreachable checks that the program stops at once with the
// model's failure when the model refuses every call, rather than waiting
// out its deadline (10 minutes on a real model).
func TestRunModelUnreachable(t *testing.T) {
	exampletest.ModelUnreachable(t, run)
}
