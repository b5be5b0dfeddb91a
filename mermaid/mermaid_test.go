package mermaid_test

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/internal/demo"
	"agentsociety/mermaid"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs; got:\n%s\nwant:\n%s", name, got, want)
	}
}

// hostile is text a model could write to break a diagram out of its label.
const hostile = "x\"]; click a1 \"javascript:alert(1)\"\n%%{init: {}}%%\r<script>end</script> #quot; `md` a|b {c} & ;\u202e\u2028"

// org is an organisation whose names and ids are hostile.
func org() mermaid.Org {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	return mermaid.Org{
		Roles: []as.Role{
			{ID: "role-1", Name: "lead", CreatedBy: as.RootID, CreatedAt: t0},
			{ID: "role-2", Name: hostile, CreatedBy: "agent-1", CreatedAt: t0},
		},
		Agents: []as.Agent{
			{ID: "agent-1", RoleID: "role-1", ParentID: as.RootID, Status: as.StatusActive},
			{ID: "end", RoleID: "role-2", ParentID: "agent-1", Status: as.StatusActive},
			{ID: "agent-3\"];x", RoleID: "role-2", ParentID: "agent-1", Status: as.StatusTerminated},
		},
		Contacts: map[string][]as.Contact{
			as.RootID: {{ID: as.UserID, Source: as.SourceSystem}, {ID: "agent-1", Source: as.SourceChild}},
			"agent-1": {{ID: as.RootID, Source: as.SourceParent}, {ID: as.UserID, Source: as.SourceFirstMessage}},
			"end":     {{ID: "agent-1", Source: as.SourceParent}, {ID: "agent-3\"];x", Source: as.SourcePreset}, {ID: "agent-gone", Source: as.SourceIntroduction}},
		},
	}
}

// TestWriteFlowchart_Golden draws an organisation with hostile names and
// ids, with and without contacts.
func TestWriteFlowchart_Golden(t *testing.T) {
	var b bytes.Buffer
	if err := mermaid.WriteFlowchart(&b, org()); err != nil {
		t.Fatal(err)
	}
	golden(t, "flowchart.golden", b.Bytes())
	noContacts := org()
	noContacts.Contacts = nil
	b.Reset()
	if err := mermaid.WriteFlowchart(&b, noContacts); err != nil {
		t.Fatal(err)
	}
	golden(t, "flowchart-nocontacts.golden", b.Bytes())
}

// seq returns events as an event log.
func seq(events []as.Event, err error) func(func(as.Event, error) bool) {
	return func(yield func(as.Event, error) bool) {
		if err != nil && !yield(as.Event{}, err) {
			return
		}
		for _, e := range events {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// TestWriteSequence_Golden draws a task's messages from a hand-made log
// with hostile text and a gap, leaving out another task's message.
func TestWriteSequence_Golden(t *testing.T) {
	msg := func(id, from, to, task string, typ as.MessageType, payload string) *as.Message {
		return &as.Message{ID: id, From: from, To: to, TaskID: task, Type: typ, Payload: []byte(payload)}
	}
	events := []as.Event{
		{Seq: 5, Kind: as.EventMessageAccepted, Message: msg("m1", as.UserID, as.RootID, "T", as.General, `{"text":"build   a\n\ncalculator"}`)},
		{Seq: 6, Kind: as.EventAgentSpawned, Agent: as.RootID, Target: "agent-1", Name: "lead"},
		{Seq: 7, Kind: as.EventMessageAccepted, Message: msg("m2", as.RootID, "agent-1", "T", as.TaskAssignment, `{"objective":"make it"}`)},
		{Seq: 8, Kind: as.EventAgentSpawned, Agent: "agent-1", Target: "end", Name: hostile},
		{Seq: 9, Kind: as.EventMessageAccepted, Message: msg("m3", "agent-1", "end", "T", as.CollaborationRequest, string(as.Text(hostile)))},
		{Seq: 10, Kind: as.EventMessageAccepted, Message: msg("m4", "end", "agent-1", "T", as.CollaborationResponse, `{"request_id":"r1","status":"completed","result":"ok"}`)},
		{Seq: 11, Kind: as.EventMessageAccepted, Message: msg("m5", "agent-1", as.UserID, "other", as.General, `{"text":"not this task"}`)},
		{Seq: 12, Kind: as.EventMessageAccepted, Message: msg("m6", "agent-1", as.UserID, "T", as.General, `{"text":"`+strings.Repeat("很长的文本", 20)+`"}`)},
	}
	var b bytes.Buffer
	if err := mermaid.WriteSequence(&b, seq(events, &as.MissedEventsError{From: 1, Oldest: 5}), "T"); err != nil {
		t.Fatal(err)
	}
	golden(t, "sequence.golden", b.Bytes())
}

// TestWriteSequence_Error checks that an error reading the log other than
// missed events is returned.
func TestWriteSequence_Error(t *testing.T) {
	want := &as.Error{Code: as.ErrStore, Message: "the disk is gone"}
	if err := mermaid.WriteSequence(io.Discard, seq(nil, want), "T"); err != want {
		t.Fatalf("WriteSequence = %v, want %v", err, want)
	}
}

// TestEscape checks that what Escape returns holds no character Mermaid
// reads as syntax, and keeps what is safe.
func TestEscape(t *testing.T) {
	got := mermaid.Escape(hostile + " 计算器，好的。 agent-1 (lead)")
	bare := regexp.MustCompile(`#[0-9]+;`).ReplaceAllString(got, "")
	if bad := regexp.MustCompile("[\"\\[\\]{}<>|`;#%&\\n\\r\u202e\u2028]").FindString(bare); bad != "" {
		t.Errorf("Escape left %q in %q", bad, got)
	}
	for _, keep := range []string{"计算器，好的。", "agent-1 (lead)", "#34;", "#60;script#62;"} {
		if !strings.Contains(got, keep) {
			t.Errorf("Escape(...) = %q, lacks %q", got, keep)
		}
	}
	// An entity code in the input is shown, not decoded.
	if got := mermaid.Escape("#quot;"); got != "#35;quot#59;" {
		t.Errorf("Escape(#quot;) = %q", got)
	}
}

// TestQuickstart draws the quick start's organisation and messages.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard only
	defer cancel()
	s, err := as.New(ctx, as.Config{Model: demo.Model(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	task, _, err := demo.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := mermaid.WriteFlowchart(&b, mermaid.OrgOf(s, true)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`a1["agent-1<br>lead"]`, `a2["agent-2<br>tester"]`, `a3["agent-3<br>developer"]`,
		"root --> a1", "a1 --> a2", "a1 --> a3", "root -. creates .-> r1", "a1 -. creates .-> r3",
		`a3 -.->|"preset"| a2`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the flowchart lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := mermaid.WriteSequence(&b, s.Events(ctx, 1), task); err != nil {
		t.Fatal(err)
	}
	got := regexp.MustCompile(`artifact#58;[a-z0-9-]+`).ReplaceAllString(b.String(), "artifact#58;ID")
	golden(t, "quickstart-sequence.golden", []byte(got))
}

// TestLongNames draws a role whose name is longer than Mermaid renders (a
// diagram over its maxTextSize, 50,000 characters, shows only an error):
// names are cut, in the flowchart and in the sequence diagram.
func TestLongNames(t *testing.T) {
	long := strings.Repeat("<", 60000)
	o := mermaid.Org{
		Roles:  []as.Role{{ID: "role-1", Name: long, CreatedBy: as.RootID}},
		Agents: []as.Agent{{ID: "agent-1" + long, RoleID: "role-1", ParentID: as.RootID}},
	}
	var b bytes.Buffer
	if err := mermaid.WriteFlowchart(&b, o); err != nil {
		t.Fatal(err)
	}
	if b.Len() > 2000 || !strings.Contains(b.String(), `r1{{"role: #60;#60;`) || !strings.Contains(b.String(), `a1["agent-1#60;`) {
		t.Errorf("the flowchart is %d bytes:\n%.1000s", b.Len(), b.String())
	}
	events := []as.Event{
		{Seq: 1, Kind: as.EventAgentSpawned, Agent: as.RootID, Target: "agent-1", Name: long},
		{Seq: 2, Kind: as.EventMessageAccepted, Message: &as.Message{From: as.RootID, To: "agent-1", TaskID: "T", Type: as.General, Payload: as.Text("hi")}},
	}
	b.Reset()
	if err := mermaid.WriteSequence(&b, seq(events, nil), "T"); err != nil {
		t.Fatal(err)
	}
	if b.Len() > 2000 || !strings.Contains(b.String(), "participant p2 as agent-1 (#60;#60;") {
		t.Errorf("the sequence diagram is %d bytes:\n%.1000s", b.Len(), b.String())
	}
}

// TestWriteSequence_OnlyMissed draws a task whose messages the log no
// longer keeps: the diagram says so, rather than being empty as for a task
// that sent none.
func TestWriteSequence_OnlyMissed(t *testing.T) {
	var b bytes.Buffer
	if err := mermaid.WriteSequence(&b, seq(nil, &as.MissedEventsError{From: 1, Oldest: 50}), "T"); err != nil {
		t.Fatal(err)
	}
	want := "sequenceDiagram\n  participant p1 as event log\n  Note over p1: events 1 to 49 are no longer kept\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	// A task with no events at all is an empty diagram.
	b.Reset()
	if err := mermaid.WriteSequence(&b, seq(nil, nil), "T"); err != nil || b.String() != "sequenceDiagram\n" {
		t.Errorf("no events: got %q, %v", b.String(), err)
	}
}

// mermaidStyleFix is what Mermaid's encodeEntities (mermaidAPI.ts) does to
// a diagram before it decodes entity codes: on a line that says style or
// classDef, then a colon, non-space characters and '#', it drops the last
// ';', for the colour codes of style statements. On a label, that breaks
// the label's last entity code, which then shows raw (#59 for ';').
var mermaidStyleFix = []*regexp.Regexp{regexp.MustCompile(`style.*:\S*#.*;`), regexp.MustCompile(`classDef.*:\S*#.*;`)}

// TestEscape_StyleLines draws labels that say style or classDef and a
// colour, as CSS does: Mermaid's rewriting of style lines must find none
// of them, so that their entity codes stay whole.
func TestEscape_StyleLines(t *testing.T) {
	texts := []string{`set style:color:#fff; now`, `style:"x"`, `a classDef b:c#d;`, "style:", "ends with style:"}
	for _, text := range texts {
		var b bytes.Buffer
		o := mermaid.Org{
			Roles:  []as.Role{{ID: "role-1", Name: text, CreatedBy: as.RootID}},
			Agents: []as.Agent{{ID: text, RoleID: "role-1", ParentID: as.RootID}},
		}
		if err := mermaid.WriteFlowchart(&b, o); err != nil {
			t.Fatal(err)
		}
		events := []as.Event{
			{Seq: 1, Kind: as.EventAgentSpawned, Agent: as.RootID, Target: "agent-1", Name: text},
			{Seq: 2, Kind: as.EventMessageAccepted, Message: &as.Message{From: as.RootID, To: "agent-1", TaskID: "T", Type: as.General, Payload: as.Text(text)}},
		}
		if err := mermaid.WriteSequence(&b, seq(events, nil), "T"); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "classDef ") {
				continue // the diagram's own
			}
			for _, rx := range mermaidStyleFix {
				if rx.MatchString(line) {
					t.Errorf("Mermaid would read this line as a style statement and break its last entity code:\n%s", line)
				}
			}
		}
	}
}
