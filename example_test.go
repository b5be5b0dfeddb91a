package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
	"agentsociety/store"
	"agentsociety/store/filestore"
)

// A Task Brief must carry the five required fields; Validate names every
// one that is missing, in order.
func ExampleTaskBrief() {
	brief := &as.TaskBrief{
		Objective:   "build a calculator",
		Constraints: []string{"HTML + JavaScript", "static page, no backend"},
	}
	err := brief.Validate()
	var e *as.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, e.MissingFields)
	}

	brief.Inputs = "digits and operators typed on the page"
	brief.Outputs = "the result shown on the page"
	brief.CompletionCriteria = "the four operations give correct results"
	fmt.Println(brief.Validate() == nil)

	b, _ := json.Marshal(brief)
	fmt.Println(string(b))
	// Output:
	// invalid_task_brief [inputs outputs completion_criteria]
	// true
	// {"objective":"build a calculator","constraints":["HTML + JavaScript","static page, no backend"],"inputs":"digits and operators typed on the page","outputs":"the result shown on the page","completion_criteria":"the four operations give correct results"}
}

// A contact registry remembers how each agent came to know each other agent.
// The first entry for a contact wins.
func ExampleContactRegistry() {
	r := as.NewContactRegistry()
	r.Add("agent-2", as.Contact{ID: "agent-1", Role: "lead", Source: as.SourceParent})
	r.Add("agent-2", as.Contact{ID: "agent-3", Role: "tester", Source: as.SourceIntroduction, IntroducedBy: "agent-1"})
	added := r.Add("agent-2", as.Contact{ID: "agent-1", Role: "lead", Source: as.SourceFirstMessage})

	fmt.Println(added, r.IsKnown("agent-2", "agent-3"), r.IsKnown("agent-3", "agent-2"))
	for _, c := range r.List("agent-2") {
		line := fmt.Sprint(c.ID, " (", c.Role, ") from ", c.Source)
		if c.IntroducedBy != "" {
			line += " by " + c.IntroducedBy
		}
		fmt.Println(line)
	}
	// Output:
	// false true false
	// agent-1 (lead) from parent
	// agent-3 (tester) from introduction by agent-1
}

// A message is shown to the agent that receives it with its source and how
// to reply (Requirement 10).
func ExampleFormatMessage() {
	m := as.Message{From: "agent-3", To: "agent-1", Type: as.General, Payload: as.Text("页面已完成：artifact:a-1")}
	fmt.Println(as.FormatMessage(m, "developer"))
	// Output:
	// 【来自 developer（agent-3）的消息】
	// 页面已完成：artifact:a-1
	// 如需回复，请使用 send_message(to='agent-3', ...)
}

// A small society of code-driven agents answers a requirement: root creates
// a lead role and spawns one lead for the task; the lead writes its work as
// an artifact and reports the reference to the user.
func Example() {
	ctx := context.Background()

	lead := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		page, err := self.PutArtifact(ctx, as.ArtifactSpec{Name: "calc.html", MediaType: "text/html", Data: []byte("<html>…</html>")})
		if err != nil {
			return err
		}
		_, err = self.SendText(ctx, as.UserID, "done: "+page.Ref())
		return err
	})
	root := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: "Own the requirement end to end."})
		if err != nil {
			return err
		}
		child, _, err := self.SpawnAgent(ctx, as.SpawnSpec{
			RoleID: role.ID,
			Brief: &as.TaskBrief{
				Objective:          m.Text(),
				Constraints:        []string{"static page"},
				Inputs:             "the user's requirement",
				Outputs:            "an artifact reference, reported to user",
				CompletionCriteria: "the page works",
			},
			Behavior: lead,
		})
		if err != nil {
			return err
		}
		_, err = self.Send(ctx, as.Outgoing{To: child.ID, Payload: as.Text(m.Text())})
		return err
	})

	s, err := as.New(ctx, as.Config{Root: root, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)

	if _, err := s.SubmitRequirement(ctx, "a calculator"); err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	reply, err := s.WaitForUserMessage(wctx, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(reply.From, len(s.Agents()))

	_, data, err := s.GetArtifact(ctx, reply.Text()[len("done: "):])
	fmt.Println(string(data), err)
	// Output:
	// agent-1 1
	// <html>…</html> <nil>
}

// WatchEvents follows the society as it works: here, the lead's turn, from
// the delivery of its brief to the end of its handling. Each event names
// the turn it happened in, so a host can tell who caused what.
func ExampleSociety_WatchEvents() {
	ctx := context.Background()
	lead := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		page, err := self.PutArtifact(ctx, as.ArtifactSpec{Name: "calc.html", MediaType: "text/html", Data: []byte("<html>…</html>")})
		if err != nil {
			return err
		}
		_, err = self.SendText(ctx, as.UserID, "done: "+page.Ref())
		return err
	})
	root := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead"})
		if err != nil {
			return err
		}
		child, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: &as.TaskBrief{
			Objective: m.Text(), Constraints: []string{}, Inputs: "the requirement", Outputs: "a page", CompletionCriteria: "it works",
		}, Behavior: lead})
		if err != nil {
			return err
		}
		_, err = self.SendText(ctx, child.ID, m.Text())
		return err
	})
	s, err := as.New(ctx, as.Config{Root: root, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)
	if _, err := s.SubmitRequirement(ctx, "a calculator"); err != nil {
		panic(err)
	}

	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for e, err := range s.WatchEvents(wctx, 1) {
		if err != nil {
			panic(err)
		}
		if e.Agent != "agent-1" {
			continue
		}
		fmt.Println(e.Kind, e.Target, e.Turn != "")
		if e.Kind == as.EventMessageHandled {
			break
		}
	}
	// Output:
	// message_delivered  true
	// artifact_stored  true
	// message_accepted user true
	// message_handled  true
}

// Done lets a goroutine that follows the society stop with it: here one
// that waits for the society to close.
func ExampleSociety_Done() {
	ctx := context.Background()
	s, err := as.New(ctx, as.Config{
		Root:   as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil }),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-s.Done()
		fmt.Println("the society is closing")
	}()
	if err := s.Close(ctx); err != nil {
		panic(err)
	}
	<-stopped
	// Output: the society is closing
}

// NewTool gives a host tool typed arguments: the model's JSON is decoded
// into a struct before the tool runs, and arguments of the wrong shape go
// back to the model as an invalid_argument error it can correct. Here a
// scripted model first passes a number where the tool wants text, reads the
// error, and calls again.
func ExampleNewTool() {
	type countArgs struct {
		Text string `json:"text"`
	}
	wordCount := as.NewTool("word_count", "Counts the words of a text.",
		json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		func(ctx context.Context, self *as.Actor, args countArgs) (any, error) {
			return map[string]int{"words": len(strings.Fields(args.Text))}, nil
		})

	model := llmtest.New(
		llmtest.Rule{Agent: as.RootID, LastContains: "how many words", Response: llmtest.Call("word_count", map[string]any{"text": 42})},
		llmtest.Rule{Agent: as.RootID, AfterTool: "word_count", Times: 1, Response: llmtest.Call("word_count", map[string]any{"text": "the quick brown fox"})},
		llmtest.Rule{Agent: as.RootID, AfterTool: "word_count", Response: llmtest.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": "4 words"}})},
		llmtest.Rule{Agent: as.RootID, AfterTool: "send_message", Response: llmtest.Say("answered")},
	)
	ctx := context.Background()
	s, err := as.New(ctx, as.Config{Model: model, Tools: []as.Tool{wordCount}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)

	if _, err := s.SubmitRequirement(ctx, "how many words in 'the quick brown fox'?"); err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	reply, err := s.WaitForUserMessage(wctx, nil)
	if err != nil {
		panic(err)
	}

	// What the model read after each call of word_count, then what user
	// was told.
	for _, req := range model.RequestsFor(as.RootID) {
		n := len(req.Messages)
		if n >= 2 && req.Messages[n-1].Role == llm.RoleTool && req.Messages[n-2].ToolCalls[0].Name == "word_count" {
			fmt.Println(req.Messages[n-1].Content)
		}
	}
	fmt.Println(reply.Text())
	// Output:
	// {"error":"invalid_argument","message":"bad arguments for word_count: \"text\" holds a number where a string is expected"}
	// {"words":4}
	// 4 words
}

// A society on a file store keeps its organisation and its artifacts when it
// is closed: opened again on the same directory, it has the same agents, on
// the same roles, under the same parents, and every artifact reads back.
func ExampleNew_fileStore() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "agentsociety-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	open := func() (*as.Society, *filestore.Store) {
		st, err := filestore.Open(dir, filestore.Options{})
		if err != nil {
			panic(err)
		}
		s, err := as.New(ctx, as.Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			panic(err)
		}
		return s, st
	}
	shut := func(s *as.Society, st *filestore.Store) {
		if err := s.Close(ctx); err != nil {
			panic(err)
		}
		if err := st.Close(); err != nil {
			panic(err)
		}
	}
	show := func(s *as.Society) {
		for _, a := range s.Agents() {
			role, _ := s.Role(a.RoleID)
			fmt.Printf("%s: role %s (%s), parent %s, task %s\n", a.ID, role.Name, role.ID, a.ParentID, a.TaskID)
		}
	}
	brief := func(objective string) *as.TaskBrief {
		return &as.TaskBrief{
			Objective:          objective,
			Constraints:        []string{"HTML + JavaScript", "static page"},
			Inputs:             "the user's requirement",
			Outputs:            "an artifact reference",
			CompletionCriteria: "the page works",
		}
	}

	s, st := open()
	root, err := s.Actor(as.RootID)
	if err != nil {
		panic(err)
	}
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "developer", Prompt: "Write the page."})
	if err != nil {
		panic(err)
	}
	var page as.Artifact
	for _, task := range []string{"task-1", "task-2"} {
		dev, _, err := root.WithTask(task).SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: brief("a calculator for " + task)})
		if err != nil {
			panic(err)
		}
		if task == "task-1" {
			x, err := s.Actor(dev.ID)
			if err != nil {
				panic(err)
			}
			page, err = x.PutArtifact(ctx, as.ArtifactSpec{Name: "calc.html", MediaType: "text/html", Data: []byte("<html>1 + 1 = 2</html>")})
			if err != nil {
				panic(err)
			}
		}
	}
	fmt.Println("before closing:")
	show(s)
	shut(s, st)

	s, st = open()
	defer shut(s, st)
	fmt.Println("after reopening:")
	show(s)
	a, data, err := s.GetArtifact(ctx, page.Ref())
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s by %s: %s\n", a.Name, a.CreatedBy, data)
	// Output:
	// before closing:
	// agent-1: role developer (role-1), parent root, task task-1
	// agent-2: role developer (role-1), parent root, task task-2
	// after reopening:
	// agent-1: role developer (role-1), parent root, task task-1
	// agent-2: role developer (role-1), parent root, task task-2
	// calc.html by agent-1: <html>1 + 1 = 2</html>
}

// A task with a budget of three model calls, driven by a model that never
// stops working: the fourth call is not made, and user is told once.
func ExampleWithBudget() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	busy := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		resp := llmtest.Call("console_print", map[string]string{"text": "still working"})
		resp.Usage = llm.Usage{InputTokens: 1000, OutputTokens: 20}
		return resp, nil
	})
	s, err := as.New(ctx, as.Config{Model: busy, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)

	task, err := s.SubmitRequirement(ctx, "work on it", as.WithBudget(as.Budget{ModelCalls: 3}))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := s.WaitForUserMessage(ctx, func(m as.Message) bool { return m.TaskID == task })
	if err != nil {
		fmt.Println(err)
		return
	}
	var report as.StatusReportPayload
	if err := m.Decode(&report); err != nil {
		fmt.Println(err)
		return
	}
	u, ok := s.Usage(task)
	if !ok {
		fmt.Println("no such task:", task)
		return
	}
	fmt.Println(report.Status)
	fmt.Printf("%d calls, %d input tokens, %d output tokens\n", u.ModelCalls, u.InputTokens, u.OutputTokens)
	// Output:
	// budget_exhausted
	// 3 calls, 3000 input tokens, 60 output tokens
}

// ExampleWithTrace sends a requirement with the host's trace context: the
// task's first events carry it, for a tracer to hang the task under the
// host's span (package otel's Inject makes such a context from a span).
func ExampleWithTrace() {
	ctx := context.Background()
	s, err := as.New(ctx, as.Config{Root: as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil }),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)
	traced := as.WithTrace(ctx, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if _, err := s.SubmitRequirement(traced, "a calculator"); err != nil {
		panic(err)
	}
	for e, err := range s.Events(ctx, 1) {
		if err != nil {
			panic(err)
		}
		if e.Trace != "" { // the root's own events, if any yet, carry none
			fmt.Println(e.Kind, e.Trace)
		}
	}
	// Output:
	// task_submitted 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
	// message_accepted 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
}

// Your own model is anything with Generate (llm.Model): adapt your
// provider's client in a few lines. The society calls it for every agent
// without a Go behaviour, for many agents at once, with the agent's system
// prompt, its history and the tools it may call; the model answers with
// text or tool calls, and reports the tokens it used. llm/openai is such an
// adapter for any OpenAI-compatible endpoint.
func ExampleConfig_model() {
	var (
		mu    sync.Mutex
		tools []string
	)
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if err := ctx.Err(); err != nil {
			return nil, err // every Model returns promptly once ctx is done
		}
		// A real adapter sends req.System, req.Messages and req.Tools to
		// its provider here, and wraps each failure in llm's error kinds
		// (llm.ErrRateLimited for a 429, llm.ErrServer for a 5xx, ...) so
		// that the society retries what is worth retrying.
		mu.Lock()
		tools = tools[:0]
		for _, t := range req.Tools {
			tools = append(tools, t.Name)
		}
		mu.Unlock()
		return &llm.Response{
			Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{
				ID:        "call-1",
				Name:      "send_message",
				Arguments: json.RawMessage(`{"to": "user", "payload": {"text": "hello from my model"}, "end_turn": true}`),
			}}},
			Usage: llm.Usage{InputTokens: 1200, OutputTokens: 30},
		}, nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := as.New(ctx, as.Config{Model: model, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)

	task, err := s.SubmitRequirement(ctx, "say hello")
	if err != nil {
		fmt.Println(err)
		return
	}
	reply, err := s.WaitForUserMessage(ctx, func(m as.Message) bool { return m.TaskID == task })
	if err != nil {
		fmt.Println(err)
		return
	}
	u, _ := s.Usage(task)
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("root's tools:", strings.Join(tools, ", "))
	fmt.Printf("user got %q from %s\n", reply.Text(), reply.From)
	fmt.Printf("the task cost %d model call, %d input and %d output tokens\n", u.ModelCalls, u.InputTokens, u.OutputTokens)
	// Output:
	// root's tools: find_role_by_name, create_role, spawn_agent, send_message, put_artifact, get_artifact, console_print, terminate_agent
	// user got "hello from my model" from root
	// the task cost 1 model call, 1200 input and 30 output tokens
}

// myStore is a store of your own: store.Store has four methods. This
// one keeps everything in a store.Memory and counts what it is asked to do;
// a real one writes to a database. Test an implementation with the
// conformance suite of package store/storetest:
//
//	func TestMyStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return newMyStore(t) })
//	}
type myStore struct {
	inner *store.Memory

	mu                  sync.Mutex
	loads, applies, put int
}

func (c *myStore) Load(ctx context.Context) (store.State, error) {
	c.mu.Lock()
	c.loads++
	c.mu.Unlock()
	return c.inner.Load(ctx)
}

func (c *myStore) Apply(ctx context.Context, ch store.Change) error {
	c.mu.Lock()
	c.applies++
	c.mu.Unlock()
	return c.inner.Apply(ctx, ch)
}

func (c *myStore) PutArtifact(ctx context.Context, a store.Artifact, data []byte) error {
	c.mu.Lock()
	c.put++
	c.mu.Unlock()
	return c.inner.PutArtifact(ctx, a, data)
}

func (c *myStore) GetArtifact(ctx context.Context, id string) (store.Artifact, []byte, error) {
	return c.inner.GetArtifact(ctx, id)
}

// A society keeps its state in the Config.Store it is given: it loads the
// store once when it opens and writes each change to it. Opened again on
// the same store, it has the same agents and artifacts. (The store's
// methods are called with no lock of the society held, so a slow store
// delays only the operation that wrote to it.)
func ExampleConfig_store() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := &myStore{inner: store.NewMemory()}
	cfg := as.Config{Store: st, Logger: slog.New(slog.DiscardHandler)}

	s, err := as.New(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	root, err := s.Actor(as.RootID)
	if err != nil {
		fmt.Println(err)
		return
	}
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "developer"})
	if err != nil {
		fmt.Println(err)
		return
	}
	dev, _, err := root.WithTask("task-1").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: &as.TaskBrief{
		Objective: "a calculator", Constraints: []string{"static page"}, Inputs: "the requirement",
		Outputs: "an artifact", CompletionCriteria: "it works",
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	x, err := s.Actor(dev.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	page, err := x.PutArtifact(ctx, as.ArtifactSpec{Name: "calc.html", MediaType: "text/html", Data: []byte("<html></html>")})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Close(ctx); err != nil {
		fmt.Println(err)
		return
	}

	s, err = as.New(ctx, cfg) // the same store: the same society
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	a, _ := s.Agent(dev.ID)
	art, _, err := s.GetArtifact(ctx, page.Ref())
	if err != nil {
		fmt.Println(err)
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	fmt.Printf("reopened: %s on task %s; %s by %s\n", a.ID, a.TaskID, art.Name, art.CreatedBy)
	fmt.Printf("the store was loaded %d times and given %d artifact; changes were applied: %v\n", st.loads, st.put, st.applies > 0)
	// Output:
	// reopened: agent-1 on task task-1; calc.html by agent-1
	// the store was loaded 2 times and given 1 artifact; changes were applied: true
}

// OnUserMessage passes every message to user to a callback, in arrival
// order, on the user endpoint's goroutine, concurrently with the host's
// own code: the callback should return quickly, so this one never blocks.
// Here a code-driven root answers each requirement at once.
func ExampleSociety_OnUserMessage() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		_, err := self.SendText(ctx, as.UserID, "on it: "+m.Text())
		return err
	})
	s, err := as.New(ctx, as.Config{Root: root, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)

	got := make(chan as.Message, 1)
	unregister := s.OnUserMessage(func(m as.Message) {
		select {
		case got <- m:
		default: // never block the society
		}
	})
	defer unregister()

	if _, err := s.SubmitRequirement(ctx, "a calculator"); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case m := <-got:
		fmt.Printf("%s says: %s\n", m.From, m.Text())
	case <-ctx.Done():
		fmt.Println(ctx.Err())
	}
	// Output:
	// root says: on it: a calculator
}
