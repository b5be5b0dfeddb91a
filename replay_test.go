package agentsociety_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	as "agentsociety"
	"agentsociety/internal/demo"
	"agentsociety/llm"
)

// runView is what a run of a society shows, with every id named by what it
// is rather than by the id the run gave it, so that two runs compare: the
// organisation, the messages each agent received in the order it received
// them, and the artifacts, byte for byte.
type runView struct {
	Org       []string            // one line per role, then per agent
	Messages  map[string][]string // by receiver
	Artifacts map[string]string   // content by artifact
}

// namer names the ids of one run: an agent by its path of role names from
// root (root/lead#1/tester#1: the first tester its parent spawned), a role
// by its name and creator, an artifact by its creator and rank, and any
// other id (task, request, message) by its rank of first appearance in the
// order viewOf reads the run, which does not depend on how the run's
// agents interleaved.
type namer struct {
	names map[string]string
	next  int
}

func (n *namer) name(s string) string {
	return llm.IDPattern.ReplaceAllStringFunc(s, func(id string) string {
		if name, ok := n.names[id]; ok {
			return name
		}
		n.next++
		n.names[id] = "#" + strconv.Itoa(n.next)
		return n.names[id]
	})
}

// viewOf reads the view of s's run from its organisation and its events.
func viewOf(t *testing.T, s *as.Society) runView {
	t.Helper()
	n := &namer{names: map[string]string{}}
	agents := s.Agents() // oldest first: a parent's children in the order it spawned them
	seen := map[string]int{}
	for _, a := range agents {
		r, _ := s.Role(a.RoleID)
		parent := n.names[a.ParentID]
		if a.ParentID == as.RootID {
			parent = as.RootID
		}
		key := parent + "/" + r.Name
		seen[key]++
		n.names[a.ID] = key + "#" + strconv.Itoa(seen[key])
	}
	roles := s.Roles()
	for _, r := range roles {
		n.names[r.ID] = "role(" + r.Name + " by " + n.name(r.CreatedBy) + ")"
	}
	evs, missed := collect(t, s, 1)
	if missed != nil {
		t.Fatalf("events missed: %v", missed)
	}
	stored := map[string]int{}
	var artifacts []as.Event
	for _, e := range evs {
		if e.Kind == as.EventArtifactStored {
			by := n.name(e.Agent)
			stored[by]++
			n.names[e.Artifact] = "artifact(" + strconv.Itoa(stored[by]) + " by " + by + ")"
			artifacts = append(artifacts, e)
		}
	}

	v := runView{Messages: map[string][]string{}, Artifacts: map[string]string{}}
	for _, r := range roles {
		spec, _ := json.Marshal(r.InterfaceSpec)
		v.Org = append(v.Org, fmt.Sprintf("%s: %q %s", n.name(r.ID), r.Prompt, spec))
	}
	for _, a := range agents {
		brief, _ := json.Marshal(a.Brief)
		v.Org = append(v.Org, fmt.Sprintf("%s on %s, %s, parent %s, brief %s", n.name(a.ID), n.name(a.RoleID), a.Status, n.name(a.ParentID), n.name(string(brief))))
	}
	byReceiver := map[string][]*as.Message{}
	for _, e := range evs {
		if e.Kind == as.EventMessageAccepted {
			to := n.name(e.Message.To)
			byReceiver[to] = append(byReceiver[to], e.Message)
		}
	}
	receivers := slices.Sorted(func(yield func(string) bool) {
		for r := range byReceiver {
			if !yield(r) {
				return
			}
		}
	})
	for _, to := range receivers {
		for _, m := range byReceiver[to] {
			v.Messages[to] = append(v.Messages[to], fmt.Sprintf("from %s, %s on task %s: %s", n.name(m.From), m.Type, n.name(m.TaskID), n.name(string(m.Payload))))
		}
	}
	for _, e := range artifacts {
		a, data, err := s.GetArtifact(context.Background(), e.Artifact)
		if err != nil {
			t.Fatal(err)
		}
		v.Artifacts[n.name(a.ID)] = fmt.Sprintf("%s %s by %s:\n%s", a.Name, a.MediaType, n.name(a.CreatedBy), data)
	}
	return v
}

// recordQuickstart runs the quick start on the demo model, recording its
// calls, and returns the view of the run, its events and the recording.
func recordQuickstart(t *testing.T) (runView, []as.Event, *llm.Recording) {
	t.Helper()
	var buf bytes.Buffer
	rec := llm.Record(demo.Model(), &buf)
	s, done := openSociety(t, as.Config{Model: rec})
	runQuickstart(t, s)
	waitQuiet(t, s)
	view := viewOf(t, s)
	evs, _ := collect(t, s, 1)
	done() // every call has returned, and its line is written
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	recording, err := llm.ReadRecording(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return view, evs, recording
}

// modelFailures returns the model calls of s that failed.
func modelFailures(t *testing.T, s *as.Society) []string {
	evs, _ := collect(t, s, 1)
	var out []string
	for _, e := range evs {
		if e.Kind == as.EventModelCallFinished && e.Code != "" {
			out = append(out, e.Agent+": "+e.Detail)
		}
	}
	return out
}

// TestReplay_Quickstart records the quick start on the demo model and
// replays it on a fresh society with no model at all: the organisation,
// the messages and the artifacts are the recorded run's, though every
// random id (task, messages, requests, artifacts) is new.
func TestReplay_Quickstart(t *testing.T) {
	want, recordedEvents, recording := recordQuickstart(t)

	replay := llm.Replay(recording)
	s := newSociety(t, as.Config{Model: replay})
	runQuickstart(t, s)
	waitQuiet(t, s)
	got := viewOf(t, s)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the replayed run (-recorded +replayed):\n%s", diff)
	}
	if f := modelFailures(t, s); len(f) > 0 {
		t.Errorf("model calls failed in the replay: %q", f)
	}
	if replay.Replayed() != recording.Len() || recording.Len() < 10 {
		t.Errorf("replayed %d of %d recorded calls", replay.Replayed(), recording.Len())
	}
	// The ids are the replay's own: the recorded ones had to be mapped.
	if got, was := s.Tasks()[0].ID, recordedEvents[0].Task; got == was {
		t.Errorf("the replayed task has the recorded task's id %s", got)
	}
	if len(got.Artifacts) != 1 || !strings.Contains(fmt.Sprint(got.Artifacts), demo.Page) {
		t.Errorf("artifacts %v; want the demo page", got.Artifacts)
	}
}

// TestReplay_Diverges replays the quick start for another requirement:
// root's first request is not the recorded one, so the model call fails
// with ErrReplayMismatch, and the society says so.
func TestReplay_Diverges(t *testing.T) {
	_, _, recording := recordQuickstart(t)
	s := newSociety(t, as.Config{Model: llm.Replay(recording), ModelRetries: -1})
	if _, err := s.SubmitRequirement(context.Background(), "请做一个记事本。"); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, s)
	f := modelFailures(t, s)
	if len(f) != 1 || !strings.Contains(f[0], llm.ErrReplayMismatch.Error()) || !strings.HasPrefix(f[0], as.RootID+": ") {
		t.Errorf("model failures %q; want root's call to mismatch", f)
	}
}

// counting is a model that counts its calls by agent.
type counting struct {
	llm.Model
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	c.mu.Lock()
	c.calls[req.Agent]++
	c.mu.Unlock()
	return c.Model.Generate(ctx, req)
}

// secondDraftModel is the demo model, except that the developer stores
// another page (which passes the tester's checks as the first did) and the
// lead tells user something else: what a fork continued with another model
// does differently.
var secondDraft = strings.Replace(demo.Page, "<h1>计算器</h1>", "<h1>计算器（第二稿）</h1>", 1)

func secondDraftModel() llm.Model {
	m := demo.Model()
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		resp, err := m.Generate(ctx, req)
		if err != nil || len(resp.Message.ToolCalls) == 0 {
			return resp, err
		}
		c := &resp.Message.ToolCalls[0]
		var args map[string]any
		if json.Unmarshal(c.Arguments, &args) != nil {
			return resp, nil
		}
		switch {
		case c.Name == "put_artifact":
			args["content"] = secondDraft
		case c.Name == "send_message" && args["to"] == as.UserID:
			p := args["payload"].(map[string]any)
			p["text"] = "第二稿：" + p["text"].(string)
		default:
			return resp, nil
		}
		c.Arguments, _ = json.Marshal(args)
		return resp, nil
	})
}

// TestFork_Quickstart forks the quick start at the event where the lead
// spawned its second child, and goes on with another model: every call
// made by then is replayed and every later one is the new model's, so the
// organisation is the recorded one while the page and what user is told
// are the new model's.
func TestFork_Quickstart(t *testing.T) {
	want, evs, recording := recordQuickstart(t)
	at, upTo, prefix := leadSpawnedBoth(t, evs)

	live := &counting{Model: secondDraftModel(), calls: map[string]int{}}
	fork := llm.Fork(recording, live, upTo)
	s := newSociety(t, as.Config{Model: fork})
	_, reply := runQuickstart(t, s)
	waitQuiet(t, s)
	got := viewOf(t, s)

	// The prefix is the recording's; every call after it is the new model's.
	if fork.Replayed() != prefix {
		t.Errorf("replayed %d calls, want the %d made by event %d", fork.Replayed(), prefix, at)
	}
	for _, a := range recording.Agents() {
		if n := len(recording.Calls(a)) - upTo[a]; live.calls[a] != n {
			t.Errorf("%s: %d calls to the new model, want %d: %v", a, live.calls[a], n, live.calls)
		}
	}
	if f := modelFailures(t, s); len(f) > 0 {
		t.Errorf("model calls failed in the fork: %q", f)
	}
	// The organisation was built by then; the suffix follows the new model.
	if diff := cmp.Diff(want.Org, got.Org); diff != "" {
		t.Errorf("the fork's organisation (-recorded +forked):\n%s", diff)
	}
	if secondDraft == demo.Page || len(got.Artifacts) != 1 || !strings.HasSuffix(fmt.Sprint(got.Artifacts), ":\n"+secondDraft+"]") {
		t.Errorf("the fork's artifacts: %v; want the second draft", got.Artifacts)
	}
	if !strings.HasPrefix(reply.Text(), "第二稿：") {
		t.Errorf("user was told %q; want the new model's words", reply.Text())
	}
	for to, msgs := range want.Messages {
		if to == as.UserID {
			continue
		}
		if diff := cmp.Diff(msgs, got.Messages[to]); diff != "" {
			t.Errorf("messages to %s (-recorded +forked):\n%s", to, diff)
		}
	}
}

// leadSpawnedBoth returns the event of a quick start's events at which the
// lead spawned its second child, and the model calls made by then, by
// agent and in all.
func leadSpawnedBoth(t *testing.T, evs []as.Event) (at uint64, upTo map[string]int, prefix int) {
	t.Helper()
	spawns := 0
	for _, e := range evs {
		if e.Kind == as.EventAgentSpawned && e.Agent != as.RootID {
			if spawns++; spawns == 2 {
				at = e.Seq
			}
		}
	}
	if at == 0 {
		t.Fatal("the lead did not spawn two children")
	}
	upTo, err := as.ModelCallsUpTo(func(yield func(as.Event, error) bool) {
		for _, e := range evs {
			if !yield(e, nil) {
				return
			}
		}
	}, at)
	if err != nil {
		t.Fatal(err)
	}
	lead := evs[slices.IndexFunc(evs, func(e as.Event) bool { return e.Kind == as.EventAgentSpawned && e.Agent == as.RootID })].Target
	if upTo[as.RootID] != 2 || upTo[lead] != 4 {
		t.Fatalf("calls up to event %d: %v; want root's 2 and the lead's 4 (two roles, two spawns)", at, upTo)
	}
	for _, n := range upTo {
		prefix += n
	}
	return at, upTo, prefix
}

// TestFork_OtherPrompt forks the quick start at the same event under
// another base prompt: the calls made by then are replayed though the
// system prompts changed, and the later ones are made with the new prompt.
func TestFork_OtherPrompt(t *testing.T) {
	want, evs, recording := recordQuickstart(t)
	_, upTo, prefix := leadSpawnedBoth(t, evs)
	base, err := os.ReadFile("internal/prompts/zh/base.txt")
	if err != nil {
		t.Fatal(err)
	}
	const rule = "- 汇报只写结论和工件引用。"
	live := demo.Model()
	fork := llm.Fork(recording, live, upTo)
	s := newSociety(t, as.Config{Model: fork, Prompts: fstest.MapFS{"base.txt": {Data: append(base, "\n"+rule+"\n"...)}}})
	runQuickstart(t, s)
	waitQuiet(t, s)
	if fork.Replayed() != prefix {
		t.Errorf("replayed %d calls, want %d", fork.Replayed(), prefix)
	}
	reqs := live.Requests()
	if len(reqs) != recording.Len()-prefix {
		t.Errorf("%d live calls, want %d", len(reqs), recording.Len()-prefix)
	}
	for _, r := range reqs {
		if !strings.Contains(r.System, rule) {
			t.Errorf("a live call of %s without the new rule", r.Agent)
		}
	}
	if diff := cmp.Diff(want, viewOf(t, s)); diff != "" {
		t.Errorf("the fork (-recorded +forked):\n%s", diff)
	}
}

// BenchmarkReplay_Quickstart runs the quick start on a fresh society per
// operation: on the demo model (the baseline), on the demo model recorded,
// and replayed from a recording.
func BenchmarkReplay_Quickstart(b *testing.B) {
	var buf bytes.Buffer
	rec := llm.Record(demo.Model(), &buf)
	s, done := openSociety(b, as.Config{Model: rec})
	runQuickstart(b, s)
	waitQuiet(b, s)
	done()
	recording, err := llm.ReadRecording(&buf)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		model func() llm.Model
	}{
		{"demo", func() llm.Model { return demo.Model() }},
		{"recorded", func() llm.Model { return llm.Record(demo.Model(), io.Discard) }},
		{"replayed", func() llm.Model { return llm.Replay(recording) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			cpu := startCPU(b)
			for b.Loop() {
				s, done := openSociety(b, as.Config{Model: c.model()})
				runQuickstart(b, s)
				waitQuiet(b, s)
				done()
			}
			cpu.report()
		})
	}
}

// TestModelCallsUpTo_PastTheEnd: a fork at an event the run never reached
// must fail, not silently fork at the last event.
func TestModelCallsUpTo_PastTheEnd(t *testing.T) {
	events := []as.Event{
		{Seq: 1, Kind: as.EventTaskSubmitted},
		{Seq: 2, Kind: as.EventModelCallStarted, Agent: "root"},
		{Seq: 3, Kind: as.EventModelCallFinished, Agent: "root"},
	}
	seq := func(yield func(as.Event, error) bool) {
		for _, e := range events {
			if !yield(e, nil) {
				return
			}
		}
	}
	calls, err := as.ModelCallsUpTo(seq, 1000)
	if !errors.Is(err, as.ErrInvalidArgument) {
		t.Errorf("ModelCallsUpTo(.., 1000) on a log of 3 events = %v, %v; want ErrInvalidArgument", calls, err)
	}
	if calls, err := as.ModelCallsUpTo(seq, 3); err != nil || calls["root"] != 1 {
		t.Errorf("ModelCallsUpTo(.., 3), the last event = %v, %v; want root's one call", calls, err)
	}
}
