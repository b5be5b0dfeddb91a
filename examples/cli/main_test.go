package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/internal/demo"
	"agentsociety/internal/script"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// output is what run writes, readable while run is writing it.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output after offset from matches re, and returns
// the match's submatches and the offset after it.
func (o *output) waitFor(t *testing.T, from int, re string) ([]string, int) {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := o.String()
		if loc := rx.FindStringSubmatchIndex(s[from:]); loc != nil {
			var subs []string
			for i := 0; i < len(loc); i += 2 {
				subs = append(subs, s[from+loc[i]:from+loc[i+1]])
			}
			return subs, from + loc[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the output never showed %s after offset %d:\n%s", re, from, s)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestSession drives the command line as a user would, through a pipe,
// while the society answers on the demo model.
func TestSession(t *testing.T) {
	// gate holds every model call until it is closed, to show that the
	// command line goes on reading while the society is busy.
	gate := make(chan struct{})
	model := demo.Model()
	gated := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return model.Generate(ctx, req)
	})

	in, typing := io.Pipe()
	defer typing.Close() // ends the goroutine that reads in
	out := &output{}
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), in, out, gated) }()
	say := func(line string) {
		t.Helper()
		if _, err := io.WriteString(typing, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}

	_, at := out.waitFor(t, 0, `/quit +close the society and exit\n`)
	say(demo.Requirement)
	m, at := out.waitFor(t, at, `submitted as (task-\S+)\n`)
	task := m[1]

	// root's first model call is held at the gate, and the command line
	// still answers.
	say("/org")
	_, at = out.waitFor(t, at, `(?m)^root\n\n`)
	close(gate)

	// The lead answers with the artifact, under the Requirement 10 source
	// line; the console leaves out the reply hint, which is for agents.
	m, at = out.waitFor(t, at, `【来自 lead（(agent-\d+)）的消息】\n您的计算器已完成并通过测试：artifact:[A-Za-z0-9-]+.*\n\n`)
	lead := m[1]
	if strings.Contains(out.String(), "如需回复") {
		t.Fatalf("the console shows the agents' reply hint:\n%s", out.String())
	}

	say("/org")
	_, at = out.waitFor(t, at, `root\n└─ `+lead+` \(lead\) `+task+`\n   ├─ agent-\d+ \(tester\)\n   └─ agent-\d+ \(developer\)\n`)
	say("/org mermaid")
	_, at = out.waitFor(t, at, `flowchart TD\n(?s:.*)a1\["`+lead+`<br>lead"\]\n(?s:.*)root --> a1\n(?s:.*)a3 -\.->\|"preset"\| a2\n`)

	// The lead may answer before the command line says the message went:
	// the two lines come in either order.
	say("@" + lead + " hello")
	_, sent := out.waitFor(t, at, `sent to `+lead+`\n`)
	_, answered := out.waitFor(t, at, `【来自 lead（`+lead+`）的消息】\n你好，我是 lead（`+lead+`）。我负责：`)
	at = max(sent, answered)

	say("/frobnicate now")
	_, at = out.waitFor(t, at, `unknown command /frobnicate \(try /help\)\n`)
	say("@nobody hi")
	_, at = out.waitFor(t, at, `error: agent_not_found: no agent "nobody"\n`)
	say("@" + lead)
	_, at = out.waitFor(t, at, `usage: @agentId text\n`)

	say("/quit")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("run did not return after /quit:\n%s", out.String())
	}
	out.waitFor(t, at, `closing the society…\nbye\n$`)
	if s := out.String(); strings.Contains(s, "level=") {
		t.Errorf("the society logged a warning or an error:\n%s", s)
	}
}

// TestEndOfInput closes the society when the input ends, even while agents
// are at work.
func TestEndOfInput(t *testing.T) {
	out := &output{}
	err := run(context.Background(), strings.NewReader(demo.Requirement+"\n"), out, demo.Model())
	if err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, 0, `submitted as task-\S+\n(?s:.*)bye\n$`)
}

// TestCancel stops reading when the context ends, though the input never
// does.
func TestCancel(t *testing.T) {
	in, typing := io.Pipe()
	defer typing.Close()
	ctx, cancel := context.WithCancel(context.Background())
	out := &output{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, in, out, demo.Model()) }()
	out.waitFor(t, 0, `/quit`)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

// TestHugeLine refuses a line longer than the command line reads and goes
// on with the next one, rather than ending the session.
func TestHugeLine(t *testing.T) {
	out := &output{}
	in := strings.NewReader(strings.Repeat("x", maxLine+10) + "\r\n/help")
	if err := run(context.Background(), in, out, demo.Model()); err != nil {
		t.Fatal(err)
	}
	_, at := out.waitFor(t, 0, `/quit +close the society and exit\n`)
	_, at = out.waitFor(t, at, `line too long`)
	out.waitFor(t, at, `/quit +close the society and exit\n(?s:.*)bye\n$`)
	if strings.Contains(out.String(), "submitted as") {
		t.Errorf("the huge line was submitted:\n%s", out.String())
	}
}

// TestOrgHostileRoleName shows /org with a role whose name holds a
// terminal escape and a line break: the tree shows them as visible
// symbols, so a model cannot clear the screen or forge a line of the tree.
func TestOrgHostileRoleName(t *testing.T) {
	const hostile = "x\x1b[2J\n└─ agent-9 (admin)\u2028\u202e"
	model := llmtest.New(
		llmtest.Rule{Agent: as.RootID, AfterTool: "create_role", Reply: func(req *llm.Request) (*llm.Response, error) {
			role, err := script.LastResult(req)
			if err != nil {
				return nil, err
			}
			return script.Call("spawn_agent", map[string]any{
				"roleId":    role.Str("roleId"),
				"taskBrief": as.TaskBrief{Objective: "o", Constraints: []string{}, Inputs: "i", Outputs: "o", CompletionCriteria: "c", Priority: "high"},
				"end_turn":  true,
			}), nil
		}},
		llmtest.Rule{Agent: as.RootID, Times: 1, Response: llmtest.Call("create_role", map[string]any{"name": hostile, "rolePrompt": "work"})},
		llmtest.Rule{Response: llmtest.Say("ok")},
	)
	in, typing := io.Pipe()
	defer typing.Close()
	out := &output{}
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), in, out, model) }()
	say := func(line string) {
		t.Helper()
		if _, err := io.WriteString(typing, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	_, at := out.waitFor(t, 0, `/quit +close the society and exit\n`)
	say("build it")
	_, at = out.waitFor(t, at, `submitted as task-\S+\n`)
	// Wait for the agent, then look at the tree.
	deadline := time.Now().Add(10 * time.Second) // a hang guard only
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the agent never showed in /org:\n%s", out.String())
		}
		say("/org")
		m, next := out.waitFor(t, at, `(?m)^root\n((?:.+\n)*)\n`)
		at = next
		if strings.Contains(m[1], "agent-") {
			if strings.ContainsAny(m[1], "\x1b\u2028\u202e") || strings.Count(m[1], "\n") != 1 {
				t.Errorf("/org shows the role name raw:\n%q", m[1])
			}
			break
		}
	}
	say("/quit")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCommandArguments answers a known command given the wrong arguments
// with its usage, not as an unknown command, and takes any white space
// between @agentId and its text.
func TestCommandArguments(t *testing.T) {
	out := &output{}
	in := strings.NewReader("/org tree\n/quit now\n/org   mermaid\n@nobody\thi\n")
	if err := run(context.Background(), in, out, demo.Model()); err != nil {
		t.Fatal(err)
	}
	_, at := out.waitFor(t, 0, `/quit +close the society and exit\n`)
	_, at = out.waitFor(t, at, `usage: /org or /org mermaid\n`)
	_, at = out.waitFor(t, at, `usage: /quit, with nothing after it\n`)
	_, at = out.waitFor(t, at, `flowchart TD\n`)
	out.waitFor(t, at, `error: agent_not_found: no agent "nobody"\n(?s:.*)bye\n$`)
}
