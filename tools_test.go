package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

var (
	toolNameRE  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	schemaTypes = map[string]bool{"object": true, "array": true, "string": true, "number": true, "integer": true, "boolean": true, "null": true}
)

// checkSchema checks the structure of a JSON Schema as model providers
// require it of tool parameters, and returns every problem it finds. top
// marks the parameters object itself, which must be an object schema with
// properties.
func checkSchema(path string, v any, top bool) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }
	s, ok := v.(map[string]any)
	if !ok {
		bad("a schema must be a JSON object, not %T", v)
		return errs
	}
	if d, ok := s["description"]; ok {
		if str, ok := d.(string); !ok || strings.TrimSpace(str) == "" {
			bad("description must be a non-empty string")
		}
	}
	var types []string
	if ty, ok := s["type"]; ok {
		switch ty := ty.(type) {
		case string:
			types = []string{ty}
		case []any:
			for _, x := range ty {
				str, ok := x.(string)
				if !ok {
					bad("type lists a %T", x)
					continue
				}
				types = append(types, str)
			}
			if len(types) == 0 {
				bad("type is an empty list")
			}
		default:
			bad("type must be a string or a list of strings, not %T", ty)
		}
	}
	for _, ty := range types {
		if !schemaTypes[ty] {
			bad("type %q is not a JSON Schema type", ty)
		}
	}
	enum, hasEnum := s["enum"]
	if hasEnum {
		list, ok := enum.([]any)
		if !ok || len(list) == 0 {
			bad("enum must be a non-empty list")
		}
		if slices.Equal(types, []string{"string"}) {
			for _, x := range list {
				if _, ok := x.(string); !ok {
					bad("enum value %v is not a string", x)
				}
			}
		}
	}
	if len(types) == 0 && !hasEnum {
		bad("a property needs a type or an enum")
	}
	if top && !slices.Equal(types, []string{"object"}) {
		bad(`the parameters must be {"type":"object", ...}, not type %v`, types)
	}
	props, hasProps := s["properties"]
	pm, propsOK := props.(map[string]any)
	if slices.Contains(types, "object") {
		if hasProps && !propsOK {
			bad("properties must be an object, not %T", props)
		}
		if top && !hasProps {
			bad("the parameters must have properties")
		}
		names := make([]string, 0, len(pm))
		for name := range pm {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			errs = append(errs, checkSchema(path+".properties."+name, pm[name], false)...)
		}
		if req, ok := s["required"]; ok {
			list, ok := req.([]any)
			if !ok {
				bad("required must be a list, not %T", req)
			}
			seen := map[string]bool{}
			for _, x := range list {
				name, ok := x.(string)
				switch {
				case !ok:
					bad("required lists a %T", x)
				case seen[name]:
					bad("required lists %q twice", name)
				case pm[name] == nil:
					bad("required names %q, which is not in properties", name)
				}
				seen[name] = true
			}
		}
	} else if hasProps || s["required"] != nil {
		bad("properties or required on a schema that is not an object")
	}
	if slices.Contains(types, "array") {
		if items, ok := s["items"]; !ok {
			bad("an array needs items")
		} else {
			errs = append(errs, checkSchema(path+".items", items, false)...)
		}
	}
	return errs
}

// checkTool checks one tool definition as a model sees it.
func checkTool(tl llm.Tool) []string {
	var errs []string
	if !toolNameRE.MatchString(tl.Name) {
		errs = append(errs, fmt.Sprintf("name %q does not match %s", tl.Name, toolNameRE))
	}
	if strings.TrimSpace(tl.Description) == "" {
		errs = append(errs, tl.Name+": empty description")
	}
	var v any
	if err := json.Unmarshal(tl.Parameters, &v); err != nil {
		return append(errs, fmt.Sprintf("%s: parameters are not JSON: %v", tl.Name, err))
	}
	return append(errs, checkSchema(tl.Name, v, true)...)
}

func TestSchemaCheckerRejectsBadSchemas(t *testing.T) {
	for _, bad := range []string{
		`[]`,
		`{"type":"string"}`,
		`{"type":"object"}`,
		`{"type":"object","properties":[]}`,
		`{"type":"object","properties":{},"required":["x"]}`,
		`{"type":"object","properties":{"a":{}}}`,
		`{"type":"object","properties":{"a":{"type":"strin"}}}`,
		`{"type":"object","properties":{"a":{"type":"array"}}}`,
		`{"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{"b":{"description":"no type"}}}}}}`,
		`{"type":"object","properties":{"a":{"enum":[]}}}`,
		`{"type":"object","properties":{"a":{"type":"string","description":""}}}`,
		`{"type":"object","properties":{"a":{"type":"string","properties":{}}}}`,
	} {
		if errs := checkTool(llm.Tool{Name: "t", Description: "d", Parameters: json.RawMessage(bad)}); len(errs) == 0 {
			t.Errorf("the checker accepts %s", bad)
		}
	}
	for _, tl := range []llm.Tool{
		{Name: "has space", Description: "d", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
		{Name: strings.Repeat("a", 65), Description: "d", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
		{Name: "ok", Description: " ", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
		{Name: "ok", Description: "d", Parameters: json.RawMessage(`{"type":`)},
	} {
		if errs := checkTool(tl); len(errs) == 0 {
			t.Errorf("the checker accepts %+v", tl)
		}
	}
	good := `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}},"b":{"enum":["x","y"]},"c":{"type":["string","null"]}},"required":["a"]}`
	if errs := checkTool(llm.Tool{Name: "ok_1-x", Description: "d", Parameters: json.RawMessage(good)}); len(errs) > 0 {
		t.Errorf("the checker refuses a good schema: %v", errs)
	}
}

// TestToolSchemasAreValidJSONSchema checks every tool definition the model
// is sent, built-in and host, for root and for a spawned agent.
func TestToolSchemasAreValidJSONSchema(t *testing.T) {
	got := make(chan llm.Request, 2)
	model := llmtest.New(llmtest.Rule{Reply: func(req *llm.Request) (*llm.Response, error) {
		got <- *req
		return llmtest.Say(""), nil
	}})
	noop := func(context.Context, *as.Actor, json.RawMessage) (any, error) { return "ok", nil }
	s := newSociety(t, as.Config{Model: model, Tools: []as.Tool{
		{Name: "host_default", Description: "a host tool with the default parameters", Handler: noop},
		{Name: "host-search", Description: "a host tool with a schema", Handler: noop,
			Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["q"]}`)},
	}})
	worker := rootSpawn(t, s, "t1", "dev", "develop", nil)
	if _, err := s.SubmitRequirement(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	sendAs(t, s, as.RootID, worker.ID, "go")
	builtins := []string{"find_role_by_name", "create_role", "spawn_agent", "send_message", "put_artifact", "get_artifact", "console_print", "terminate_agent"}
	for range 2 {
		req := recv(t, got, "a model call")
		names := toolNames(req)
		for _, want := range append(builtins, "host_default", "host-search") {
			if !slices.Contains(names, want) {
				t.Errorf("%s is not offered %s; it has %v", req.Agent, want, names)
			}
		}
		seen := map[string]bool{}
		for _, tl := range req.Tools {
			if seen[tl.Name] {
				t.Errorf("%s is offered %s twice", req.Agent, tl.Name)
			}
			seen[tl.Name] = true
			for _, e := range checkTool(tl) {
				t.Errorf("%s's tool %s: %s\n%s", req.Agent, tl.Name, e, tl.Parameters)
			}
		}
	}
}

type toolRefusal struct {
	name    string
	tool    string
	args    string
	code    as.Code
	missing []string
	msgType string
	agentID string
	detail  string // a substring of the message, when it matters
}

func TestEveryRefusalReachesTheModelAsACodedToolResult(t *testing.T) {
	st := newRecordingStore()
	rootInbox := newInbox()
	strangerInbox := newInbox()
	hostTools := []as.Tool{
		{Name: "fail_plain", Description: "fails with a plain error", Handler: func(context.Context, *as.Actor, json.RawMessage) (any, error) {
			return nil, errors.New("disk full")
		}},
		{Name: "fail_coded", Description: "fails with a coded error", Handler: func(context.Context, *as.Actor, json.RawMessage) (any, error) {
			return nil, &as.Error{Code: as.ErrInvalidArgument, Message: "which target?", MissingFields: []string{"target"}}
		}},
		{Name: "panics", Description: "panics", Handler: func(context.Context, *as.Actor, json.RawMessage) (any, error) {
			panic("host tool bug")
		}},
		{Name: "bad_result", Description: "returns what JSON cannot encode", Handler: func(context.Context, *as.Actor, json.RawMessage) (any, error) {
			return map[string]any{"ch": make(chan int)}, nil
		}},
	}
	const maxArtifact = 64
	model := llmtest.New(llmtest.Rule{Name: "brief", Response: llmtest.Say("")}) // replaced below, once the ids are known
	var modelMu sync.Mutex
	s := newSociety(t, as.Config{
		Store:            st,
		Root:             rootInbox.behavior(),
		ContactPolicy:    as.ContactStrict,
		MaxArtifactBytes: maxArtifact,
		Tools:            hostTools,
		MaxSteps:         64,
		Model: llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
			modelMu.Lock()
			m := model
			modelMu.Unlock()
			return m.Generate(ctx, req)
		}),
	})
	worker := rootSpawn(t, s, "t1", "worker", "MARK-refusals: do the work", nil)
	st.waitBriefTurn(t, worker.ID)
	stranger := rootSpawn(t, s, "t2", "worker", "MARK-refusals: do the work", strangerInbox.behavior())
	role := worker.RoleID // created by root: the worker does not own it

	brief := mustJSON(t, validBrief())
	cases := []toolRefusal{
		{name: "brief missing three fields", tool: "spawn_agent", args: `{"roleId":"` + role + `","taskBrief":{"objective":"x","constraints":[]}}`,
			code: as.ErrInvalidTaskBrief, missing: []string{"inputs", "outputs", "completion_criteria"}},
		{name: "brief blank fields", tool: "spawn_agent", args: `{"roleId":"` + role + `","taskBrief":{"objective":"  ","constraints":["Python"],"inputs":"a","outputs":"\t","completion_criteria":"c"}}`,
			code: as.ErrInvalidTaskBrief, missing: []string{"objective", "outputs"}},
		{name: "no brief", tool: "spawn_agent", args: `{"roleId":"` + role + `"}`,
			code: as.ErrInvalidTaskBrief, missing: []string{"objective", "constraints", "inputs", "outputs", "completion_criteria"}},
		{name: "role of another creator", tool: "spawn_agent", args: `{"roleId":"` + role + `","taskBrief":` + brief + `}`,
			code: as.ErrNotRoleOwner},
		{name: "parent mismatch", tool: "spawn_agent", args: `{"roleId":"` + role + `","parentAgentId":"root","taskBrief":` + brief + `}`,
			code: as.ErrParentMismatch, agentID: "root"},
		{name: "unknown role", tool: "spawn_agent", args: `{"roleId":"role-404","taskBrief":` + brief + `}`,
			code: as.ErrRoleNotFound},
		{name: "unknown agent", tool: "send_message", args: `{"to":"agent-404","payload":{"text":"hi"}}`,
			code: as.ErrAgentNotFound, agentID: "agent-404"},
		{name: "to oneself", tool: "send_message", args: `{"to":"` + worker.ID + `","payload":{"text":"hi"}}`,
			code: as.ErrInvalidArgument, agentID: worker.ID},
		{name: "payload not an object", tool: "send_message", args: `{"to":"root","payload":[1,2]}`,
			code: as.ErrInvalidMessageFormat, msgType: "general"},
		{name: "task_assignment without a brief", tool: "send_message", args: `{"to":"root","message_type":"task_assignment","payload":{"objective":"x"}}`,
			code: as.ErrInvalidMessageFormat, msgType: "task_assignment", missing: []string{"constraints", "inputs", "outputs", "completion_criteria"}},
		{name: "empty status_report", tool: "send_message", args: `{"to":"root","message_type":"status_report","payload":{}}`,
			code: as.ErrInvalidMessageFormat, msgType: "status_report", missing: []string{"status"}},
		{name: "introduction_request without capability", tool: "send_message", args: `{"to":"root","message_type":"introduction_request","payload":{"reason":"need a DBA"}}`,
			code: as.ErrInvalidMessageFormat, msgType: "introduction_request", missing: []string{"required_capability"}},
		{name: "introduction_response without target", tool: "send_message", args: `{"to":"root","message_type":"introduction_response","payload":{"text":"ask them"}}`,
			code: as.ErrInvalidMessageFormat, msgType: "introduction_response", missing: []string{"target_agent_id"}},
		{name: "collaboration_request without subtask", tool: "send_message", args: `{"to":"root","message_type":"collaboration_request","payload":{"text":"help"}}`,
			code: as.ErrInvalidMessageFormat, msgType: "collaboration_request", missing: []string{"subtask_description"}},
		{name: "completed collaboration_response without result", tool: "send_message", args: `{"to":"root","message_type":"collaboration_response","payload":{"request_id":"req-1","status":"completed"}}`,
			code: as.ErrInvalidMessageFormat, msgType: "collaboration_response", missing: []string{"result_data"}},
		{name: "failed collaboration_response without error_message", tool: "send_message", args: `{"to":"root","message_type":"collaboration_response","payload":{"request_id":"req-1","status":"error"}}`,
			code: as.ErrInvalidMessageFormat, msgType: "collaboration_response", missing: []string{"error_message"}},
		{name: "stranger under ContactStrict", tool: "send_message", args: `{"to":"` + stranger.ID + `","payload":{"text":"hello"}}`,
			code: as.ErrUnknownContact, agentID: stranger.ID},
		{name: "path as artifact ref", tool: "get_artifact", args: `{"ref":"../etc/passwd"}`,
			code: as.ErrInvalidArtifactRef, detail: "../etc/passwd"},
		{name: "unknown artifact", tool: "get_artifact", args: `{"ref":"artifact:nope"}`,
			code: as.ErrArtifactNotFound},
		{name: "artifact too large", tool: "put_artifact", args: `{"name":"big","content":"` + strings.Repeat("x", maxArtifact+1) + `"}`,
			code: as.ErrArtifactTooLarge},
		{name: "blank role name", tool: "create_role", args: `{"name":"   ","rolePrompt":"x"}`,
			code: as.ErrInvalidArgument, missing: []string{"name"}},
		{name: "malformed JSON", tool: "create_role", args: `{"name":`,
			code: as.ErrInvalidArgument},
		{name: "arguments not an object", tool: "send_message", args: `[1,2]`,
			code: as.ErrInvalidArgument},
		{name: "brief under a misspelt key", tool: "spawn_agent", args: `{"roleId":"role-1","task_brief":` + brief + `}`,
			code: as.ErrInvalidArgument, detail: `unknown argument "task_brief" for spawn_agent: did you mean "taskBrief"?`},
		{name: "brief field under a misspelt key", tool: "spawn_agent", args: `{"roleId":"role-1","taskBrief":{"objective":"x","constraints":[],"inputs":"i","outputs":"o","completionCriteria":"c"}}`,
			code: as.ErrInvalidArgument, detail: `unknown argument "taskBrief.completionCriteria" for spawn_agent: did you mean "taskBrief.completion_criteria"?`},
		{name: "number for roleId", tool: "spawn_agent", args: `{"roleId":7}`,
			code: as.ErrInvalidArgument},
		{name: "number for to", tool: "send_message", args: `{"to":5,"payload":{}}`,
			code: as.ErrInvalidArgument},
		{name: "list for ref", tool: "get_artifact", args: `{"ref":["artifact:x"]}`,
			code: as.ErrInvalidArgument},
		{name: "unknown tool", tool: "launch_rockets", args: `{}`,
			code: as.ErrUnknownTool, detail: "launch_rockets"},
		{name: "host tool plain error", tool: "fail_plain", args: `{}`,
			code: as.ErrToolFailed, detail: "disk full"},
		{name: "host tool coded error", tool: "fail_coded", args: `{}`,
			code: as.ErrInvalidArgument, missing: []string{"target"}, detail: "which target?"},
		{name: "host tool panics", tool: "panics", args: `{}`,
			code: as.ErrToolFailed},
		{name: "host tool result not JSON", tool: "bad_result", args: `{}`,
			code: as.ErrToolFailed},
	}

	var rules []llmtest.Rule
	for _, c := range cases {
		rules = append(rules, llmtest.Rule{Name: c.name, Agent: worker.ID, Times: 1, Response: llmtest.Call(c.tool, c.args)})
	}
	// After every refusal the agent keeps going: a valid call still works.
	rules = append(rules, llmtest.Rule{Name: "still working", Agent: worker.ID, Times: 1, Response: llmtest.Call("console_print", `{"text":"still here"}`)})
	done := make(chan struct{})
	rules = append(rules, llmtest.Rule{Name: "end", Agent: worker.ID, Reply: func(*llm.Request) (*llm.Response, error) {
		close(done)
		return llmtest.Say("done"), nil
	}})
	modelMu.Lock()
	model = llmtest.New(rules...)
	m := model
	modelMu.Unlock()

	before := snapshot(t, s)
	mark := st.mark()
	kick := sendAs(t, s, as.RootID, worker.ID, "go")
	recv(t, done, "the end of the worker's turn")
	st.waitFinished(t, kick.ID)

	sameState(t, before, s)
	st.assertOnly(t, mark, kick)
	if n := st.artifacts(); n != 0 {
		t.Errorf("%d artifacts were stored", n)
	}
	select {
	case msg := <-rootInbox.ch:
		t.Errorf("root got %+v", msg)
	case msg := <-strangerInbox.ch:
		t.Errorf("the stranger got %+v", msg)
	default:
	}

	reqs := m.RequestsFor(worker.ID)
	if len(reqs) != len(cases)+2 {
		t.Fatalf("%d model calls, want %d", len(reqs), len(cases)+2)
	}
	for i, c := range cases {
		call, res := lastCallAndResult(t, reqs[i+1])
		if call.Name != c.tool || string(call.Arguments) != c.args {
			t.Errorf("%s: the result answers %s(%s)", c.name, call.Name, call.Arguments)
			continue
		}
		if !strings.Contains(res.Content, `"error":"`+string(c.code)+`"`) {
			t.Errorf("%s: the model got %s, want \"error\":%q", c.name, res.Content, c.code)
			continue
		}
		var e toolError
		if err := json.Unmarshal([]byte(res.Content), &e); err != nil {
			t.Errorf("%s: the result is not JSON: %v: %s", c.name, err, res.Content)
			continue
		}
		if e.Error != string(c.code) || !slices.Equal(e.MissingFields, c.missing) || e.MessageType != c.msgType || e.AgentID != c.agentID {
			t.Errorf("%s: the model got %s,\nwant code %s, missing_fields %q, message_type %q, agentId %q", c.name, res.Content, c.code, c.missing, c.msgType, c.agentID)
		}
		if e.Message == "" || !strings.Contains(e.Message, c.detail) {
			t.Errorf("%s: message %q, want a message containing %q", c.name, e.Message, c.detail)
		}
	}
	_, res := lastCallAndResult(t, reqs[len(cases)+1])
	if res.Content != `{"ok":true}` {
		t.Errorf("after the refusals, console_print gave %s", res.Content)
	}
}

func TestHostToolsReachTheirRolesWithTheCallersIdentity(t *testing.T) {
	type seen struct {
		tool, id, roleID, task, args string
	}
	var mu sync.Mutex
	var calls []seen
	record := func(name string, result func(self *as.Actor) any) func(context.Context, *as.Actor, json.RawMessage) (any, error) {
		return func(_ context.Context, self *as.Actor, args json.RawMessage) (any, error) {
			mu.Lock()
			calls = append(calls, seen{name, self.ID(), self.Agent().RoleID, self.TaskID(), string(args)})
			mu.Unlock()
			return result(self), nil
		}
	}
	type whoami struct {
		ID     string          `json:"id"`
		RoleID string          `json:"roleId"`
		Task   string          `json:"task"`
		Extra  json.RawMessage `json:"extra,omitempty"`
	}
	tools := []as.Tool{
		{Name: "whoami", Description: "says who calls", Handler: record("whoami", func(self *as.Actor) any {
			return whoami{ID: self.ID(), RoleID: self.Agent().RoleID, Task: self.TaskID(), Extra: json.RawMessage(`{"n":1}`)}
		})},
		{Name: "deploy", Description: "deploys; for ops only", Roles: []string{"ops"},
			Parameters: json.RawMessage(`{"type":"object","properties":{"env":{"type":"string"}},"required":["env"]}`),
			Handler:    record("deploy", func(*as.Actor) any { return map[string]any{"deployed": true, "url": "https://example.test/app"} })},
	}
	dev := make(chan struct{})
	ops := make(chan struct{})
	root := make(chan struct{})
	model := llmtest.New(
		llmtest.Rule{Agent: as.RootID, Reply: func(*llm.Request) (*llm.Response, error) { close(root); return llmtest.Say(""), nil }},
		llmtest.Rule{SystemContains: "MARK-dev", LastContains: "message_type: task_assignment", Response: llmtest.Call("whoami", `{"x": 1}`)},
		llmtest.Rule{SystemContains: "MARK-dev", AfterTool: "whoami", Response: llmtest.Call("deploy", `{"env":"prod"}`)},
		llmtest.Rule{SystemContains: "MARK-dev", AfterTool: "deploy", Reply: func(*llm.Request) (*llm.Response, error) { close(dev); return llmtest.Say(""), nil }},
		llmtest.Rule{SystemContains: "MARK-ops", LastContains: "message_type: task_assignment", Response: llmtest.Call("deploy", `{"env":"prod"}`)},
		llmtest.Rule{SystemContains: "MARK-ops", AfterTool: "deploy", Response: llmtest.Call("whoami", nil)},
		llmtest.Rule{SystemContains: "MARK-ops", AfterTool: "whoami", Reply: func(*llm.Request) (*llm.Response, error) { close(ops); return llmtest.Say(""), nil }},
	)
	s := newSociety(t, as.Config{Model: model, Tools: tools})
	devAgent := rootSpawn(t, s, "t-dev", "dev", "MARK-dev", nil)
	opsAgent := rootSpawn(t, s, "t-ops", "ops", "MARK-ops", nil)
	if _, err := s.SubmitRequirement(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	recv(t, root, "root's call")
	recv(t, dev, "the dev agent's turn")
	recv(t, ops, "the ops agent's turn")

	// Who sees what.
	for id, want := range map[string][]string{as.RootID: {"whoami"}, devAgent.ID: {"whoami"}, opsAgent.ID: {"whoami", "deploy"}} {
		for _, req := range model.RequestsFor(id) {
			names := toolNames(req)
			for _, h := range []string{"whoami", "deploy"} {
				if slices.Contains(names, h) != slices.Contains(want, h) {
					t.Errorf("%s is offered %v; of the host tools it should see only %v", id, names, want)
				}
			}
			for _, tl := range req.Tools {
				if tl.Name == "whoami" && string(tl.Parameters) != `{"type":"object","properties":{}}` {
					t.Errorf("nil Parameters reach the model as %s", tl.Parameters)
				}
			}
		}
	}

	// The dev agent may not call deploy; ops may, and both learn who they are.
	devReqs, opsReqs := model.RequestsFor(devAgent.ID), model.RequestsFor(opsAgent.ID)
	if len(devReqs) != 3 || len(opsReqs) != 3 {
		t.Fatalf("dev made %d calls and ops %d, want 3 each", len(devReqs), len(opsReqs))
	}
	wantJSON := func(id, roleID, task string) string {
		return `{"id":"` + id + `","roleId":"` + roleID + `","task":"` + task + `","extra":{"n":1}}`
	}
	checks := []struct {
		req  llm.Request
		tool string
		want string
	}{
		{devReqs[1], "whoami", wantJSON(devAgent.ID, devAgent.RoleID, "t-dev")},
		{opsReqs[1], "deploy", `{"deployed":true,"url":"https://example.test/app"}`},
		{opsReqs[2], "whoami", wantJSON(opsAgent.ID, opsAgent.RoleID, "t-ops")},
	}
	for _, c := range checks {
		call, res := lastCallAndResult(t, c.req)
		if call.Name != c.tool || res.Content != c.want {
			t.Errorf("%s: %s gave the model %s, want %s", c.req.Agent, call.Name, res.Content, c.want)
		}
	}
	call, res := lastCallAndResult(t, devReqs[2])
	var e toolError
	if call.Name != "deploy" || json.Unmarshal([]byte(res.Content), &e) != nil || e.Error != string(as.ErrUnknownTool) {
		t.Errorf("dev calling deploy got %s, want unknown_tool", res.Content)
	}

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(calls, func(i, j int) bool { return calls[i].id+calls[i].tool < calls[j].id+calls[j].tool })
	want := []seen{
		{"whoami", devAgent.ID, devAgent.RoleID, "t-dev", `{"x": 1}`},
		{"deploy", opsAgent.ID, opsAgent.RoleID, "t-ops", `{"env":"prod"}`},
		{"whoami", opsAgent.ID, opsAgent.RoleID, "t-ops", `{}`},
	}
	sort.Slice(want, func(i, j int) bool { return want[i].id+want[i].tool < want[j].id+want[j].tool })
	if !slices.Equal(calls, want) {
		t.Errorf("handlers saw %+v\nwant %+v", calls, want)
	}
}

func TestHostToolConfigIsValidatedByNew(t *testing.T) {
	h := func(context.Context, *as.Actor, json.RawMessage) (any, error) { return nil, nil }
	ok := as.Tool{Name: "ok", Description: "fine", Handler: h}
	for _, c := range []struct {
		name  string
		tools []as.Tool
		want  string
	}{
		{"duplicate name", []as.Tool{ok, ok}, "twice"},
		{"built-in name", []as.Tool{{Name: "send_message", Description: "mine", Handler: h}}, "built-in"},
		{"built-in name get_artifact", []as.Tool{{Name: "get_artifact", Description: "mine", Handler: h}}, "built-in"},
		{"empty name", []as.Tool{{Name: "", Description: "d", Handler: h}}, "name"},
		{"name with a space", []as.Tool{{Name: "my tool", Description: "d", Handler: h}}, "name"},
		{"name with a dot", []as.Tool{{Name: "my.tool", Description: "d", Handler: h}}, "name"},
		{"non-ASCII name", []as.Tool{{Name: "工具", Description: "d", Handler: h}}, "name"},
		{"name of 65 bytes", []as.Tool{{Name: strings.Repeat("a", 65), Description: "d", Handler: h}}, "name"},
		{"nil handler", []as.Tool{{Name: "nohandler", Description: "d"}}, "Handler"},
		{"array parameters", []as.Tool{{Name: "p", Description: "d", Handler: h, Parameters: json.RawMessage(`[]`)}}, "Parameters"},
		{"string parameters", []as.Tool{{Name: "p", Description: "d", Handler: h, Parameters: json.RawMessage(`"object"`)}}, "Parameters"},
		{"malformed parameters", []as.Tool{{Name: "p", Description: "d", Handler: h, Parameters: json.RawMessage(`{"type":`)}}, "Parameters"},
		{"empty parameters", []as.Tool{{Name: "p", Description: "d", Handler: h, Parameters: json.RawMessage{}}}, "Parameters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := as.New(context.Background(), as.Config{Logger: quiet, Tools: c.tools})
			if err == nil {
				s.Close(context.Background())
				t.Fatalf("New accepted %+v", c.tools)
			}
			if s != nil {
				t.Errorf("New returned a society with its error %v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
	good := []as.Tool{ok, {Name: "Tool_2-x", Description: "d", Handler: h, Roles: []string{"ops"}, Parameters: json.RawMessage(` {"type":"object","properties":{}} `)}, {Name: strings.Repeat("b", 64), Description: "d", Handler: h}}
	s, err := as.New(context.Background(), as.Config{Logger: quiet, Tools: good})
	if err != nil {
		t.Fatalf("New refused valid tools: %v", err)
	}
	s.Close(context.Background())
}

// mustJSON marshals v, failing the test if it does not encode.
func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHostToolErrorsKeepTheirCode checks that a host tool's coded error
// reaches the model with its code, whether returned as is, wrapped, or as a
// bare Code.
func TestHostToolErrorsKeepTheirCode(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		code string
	}{
		"error":   {&as.Error{Code: as.ErrRoleNotFound, Message: "no such role"}, "role_not_found"},
		"wrapped": {fmt.Errorf("lookup: %w", &as.Error{Code: as.ErrAgentNotFound, Message: "gone"}), "agent_not_found"},
		"code":    {as.ErrArtifactNotFound, "artifact_not_found"},
		"plain":   {errors.New("disk on fire"), "tool_failed"},
	} {
		t.Run(name, func(t *testing.T) {
			results := make(chan string, 1)
			model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
				if r := lastToolResult(req); r != "" {
					results <- r
					return llmtest.Say(""), nil
				}
				return call("c", "lookup", `{}`), nil
			})
			s := newSociety(t, as.Config{Model: model, Tools: []as.Tool{{
				Name: "lookup", Description: "looks up",
				Handler: func(context.Context, *as.Actor, json.RawMessage) (any, error) { return nil, tc.err },
			}}})
			if _, err := s.SubmitRequirement(context.Background(), "x"); err != nil {
				t.Fatal(err)
			}
			if r := recv(t, results, "the tool result"); !strings.Contains(r, `"error":"`+tc.code+`"`) {
				t.Fatalf("tool result %s, want code %s", r, tc.code)
			}
		})
	}
}

// wcArgs are the arguments of the test tool: a field of each JSON kind.
type wcArgs struct {
	Text  string            `json:"text"`
	Max   int               `json:"max"`
	Ratio *float64          `json:"ratio"`
	Tags  []string          `json:"tags"`
	Opts  map[string]string `json:"opts"`
	Deep  struct {
		On bool `json:"on"`
	} `json:"deep"`
}

// wcTool returns a NewTool over wcArgs that records what it was called with.
func wcTool(got *[]wcArgs, err error) as.Tool {
	return as.NewTool("word_count", "Counts words.", json.RawMessage(`{"type":"object"}`),
		func(ctx context.Context, self *as.Actor, a wcArgs) (any, error) {
			*got = append(*got, a)
			if err != nil {
				return nil, err
			}
			return map[string]int{"words": len(strings.Fields(a.Text))}, nil
		})
}

func TestNewToolDecodesTheArguments(t *testing.T) {
	var got []wcArgs
	tool := wcTool(&got, nil)
	if tool.Name != "word_count" || tool.Description != "Counts words." || string(tool.Parameters) != `{"type":"object"}` || tool.Handler == nil || tool.Roles != nil {
		t.Fatalf("NewTool made %+v", tool)
	}
	out, err := tool.Handler(context.Background(), nil, json.RawMessage(`{"text":"a b c","max":3,"ratio":0.5,"tags":["x"],"opts":{"k":"v"},"deep":{"on":true},"extra":"ignored"}`))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(out); string(b) != `{"words":3}` {
		t.Fatalf("result %s", b)
	}
	if len(got) != 1 {
		t.Fatalf("fn called %d times", len(got))
	}
	a := got[0]
	if a.Text != "a b c" || a.Max != 3 || a.Ratio == nil || *a.Ratio != 0.5 || len(a.Tags) != 1 || a.Opts["k"] != "v" || !a.Deep.On {
		t.Fatalf("fn got %+v", a)
	}

	// No arguments at all decode as the zero value.
	for _, raw := range []string{``, `  `, `{}`} {
		got = nil
		if _, err := tool.Handler(context.Background(), nil, json.RawMessage(raw)); err != nil || len(got) != 1 || got[0].Text != "" || got[0].Ratio != nil {
			t.Fatalf("arguments %q: fn got %+v, err %v", raw, got, err)
		}
	}
}

func TestNewToolPassesFnsErrorsThrough(t *testing.T) {
	var got []wcArgs
	want := &as.Error{Code: as.ErrArtifactNotFound, Message: "no such text"}
	_, err := wcTool(&got, want).Handler(context.Background(), nil, json.RawMessage(`{"text":"x"}`))
	if err != want {
		t.Fatalf("err = %v, want fn's own error", err)
	}
}

func TestNewToolRefusesBadArguments(t *testing.T) {
	for _, c := range []struct {
		name, args string
		says       string // what the message must say, after the tool's name
	}{
		{"malformed JSON", `{"text":`, "the arguments are not valid JSON (unexpected end of JSON input"},
		{"trailing garbage", `{"text":"a"} x`, "the arguments are not valid JSON (invalid character 'x' after top-level value, at byte"},
		{"number for a string", `{"text":42}`, `"text" holds a number where a string is expected`},
		{"string for an int", `{"max":"3"}`, `"max" holds a string where a whole number is expected`},
		{"fraction for an int", `{"max":1.5}`, `"max" holds 1.5 where a whole number is expected`},
		{"whole number with an exponent", `{"max":1e3}`, `"max" holds 1e3, which is not written as a whole number: write it in digits only, as 1000`},
		{"string for a number", `{"ratio":"0.5"}`, `"ratio" holds a string where a number is expected`},
		{"object for an array", `{"tags":{"a":1}}`, `"tags" holds a JSON object where an array is expected`},
		{"number in an array", `{"tags":["a",2]}`, `"tags" holds a number where a string is expected`},
		{"array for an object", `{"opts":[1]}`, `"opts" holds an array where a JSON object is expected`},
		{"nested field", `{"deep":{"on":"yes"}}`, `"deep.on" holds a string where true or false is expected`},
		{"boolean for a string", `{"text":true}`, `"text" holds true or false where a string is expected`},
		{"array for the arguments", `["a"]`, "the arguments must be a JSON object, not an array"},
		{"string for the arguments", `"a b"`, "the arguments must be a JSON object, not a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []wcArgs
			out, err := wcTool(&got, nil).Handler(context.Background(), nil, json.RawMessage(c.args))
			if !errors.Is(err, as.ErrInvalidArgument) {
				t.Fatalf("err = %v, want %s", err, as.ErrInvalidArgument)
			}
			var e *as.Error
			if !errors.As(err, &e) || e.Code != as.ErrInvalidArgument {
				t.Fatalf("err %#v is not a coded *Error", err)
			}
			if want := "bad arguments for word_count: " + c.says; !strings.HasPrefix(e.Message, want) {
				t.Fatalf("message %q\nwant it to start %q", e.Message, want)
			}
			if out != nil || len(got) != 0 {
				t.Fatalf("the tool ran on bad arguments: %v, %+v", out, got)
			}
		})
	}
}

func TestNewToolWithoutAFuncIsRefusedByNew(t *testing.T) {
	tool := as.NewTool[wcArgs]("word_count", "Counts words.", nil, nil)
	if tool.Handler != nil {
		t.Fatal("a nil fn gave a Handler")
	}
	_, err := as.New(context.Background(), as.Config{Logger: quiet, Tools: []as.Tool{tool}})
	if err == nil || !strings.Contains(err.Error(), "no Handler") {
		t.Fatalf("New = %v, want a refusal of the tool without a Handler", err)
	}
}

func TestCollaborationRequestBySendMessage(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	results := make(chan string, 4)
	step := 0
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if last := req.Messages[len(req.Messages)-1]; strings.Contains(last.Content, "message_type: task_assignment") {
			return llmtest.Say(""), nil // the brief's turn: the request waits for "go"
		}
		if r := lastToolResult(req); r != "" {
			select {
			case results <- r:
			default: // the requests that follow the first's timeout
			}
			return llmtest.Say("waiting"), nil
		}
		step++
		return call("c1", "send_message", `{"to":"agent-2","message_type":"collaboration_request","payload":{"subtask_description":"review","context":"artifact:a-1","timeout_seconds":0.02}}`), nil
	})
	s := newSociety(t, as.Config{Model: model, DefaultBehavior: nil})
	lead, _ := chain(t, s, in.behavior()) // agent-1, driven by the model, and agent-2
	if _, err := s.SendTextToAgent(ctx, lead.ID(), "go", ""); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, results, "the tool result"); !strings.Contains(r, `"request_id":"req-`) || !strings.Contains(r, `"status":"pending"`) {
		t.Fatalf("tool result %s", r)
	}
	m := in.next(t)
	var p as.CollaborationRequestPayload
	if m.Decode(&p); p.SubtaskDescription != "review" || string(p.Context) != `"artifact:a-1"` || p.TimeoutSeconds != 0.02 {
		t.Fatalf("helper got %s", m.Payload)
	}
}

// TestArgumentsAreCheckedStrictly: an unknown key is refused with the
// nearest known one suggested, at any depth; a brief passed as JSON text
// is read as the brief; a key the tool knows is not refused.
func TestArgumentsAreCheckedStrictly(t *testing.T) {
	brief, _ := json.Marshal(validBrief())
	asText, _ := json.Marshal(string(brief))
	results := callTools(t, as.Config{}, newInbox().behavior(),
		toolCall{"create_role", `{"name":"w","rolePrompt":"work"}`},
		toolCall{"spawn_agent", `{"roleId":"role-3","task_brief":` + string(brief) + `}`},
		toolCall{"spawn_agent", `{"RoleID":"role-3","taskBrief":` + string(brief) + `}`},
		toolCall{"send_message", `{"to":"agent-2","payload":{"text":"hi"},"mesage_type":"general"}`},
		toolCall{"spawn_agent", `{"roleId":"role-3","taskBrief":` + string(asText) + `}`},
		toolCall{"get_artifact", `{"ref":"artifact:x","end_turn":false,"colour":"red"}`},
	)
	want := []string{
		`"roleId":"role-3"`,
		`unknown argument \"task_brief\" for spawn_agent: did you mean \"taskBrief\"? The arguments are: roleId, taskBrief, parentAgentId, budget.`,
		`unknown argument \"RoleID\" for spawn_agent: did you mean \"roleId\"?`,
		`unknown argument \"mesage_type\" for send_message: did you mean \"message_type\"?`,
		`"agentId":"agent-3"`,
		`unknown argument \"colour\" for get_artifact. The arguments are: ref, offset, limit.`,
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(results), len(want), results)
	}
	for i, r := range results {
		if !strings.Contains(r, want[i]) {
			t.Errorf("call %d gave %s, want it to contain %s", i+1, r, want[i])
		}
	}
}

// TestGetArtifactPages: get_artifact returns at most limit bytes (8 KB by
// default) from offset, never splitting a character, and says the size,
// whether it truncated and where the next page starts.
func TestGetArtifactPages(t *testing.T) {
	ctx := context.Background()
	text := strings.Repeat("汉", 4000) // 12,000 bytes
	var ref string
	args := []string{`{"ref":"%s"}`, `{"ref":"%s","offset":8190}`, `{"ref":"%s","offset":10,"limit":2}`, `{"ref":"%s","offset":-1}`,
		`{"ref":"%s","offset":1,"limit":9223372036854775807}`}
	results := make(chan string, len(args))
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if r := lastToolResult(req); r != "" {
			results <- r
		}
		n := 0
		for _, m := range req.Messages {
			n += len(m.ToolCalls)
		}
		if n == len(args) {
			return llmtest.Say("read"), nil
		}
		return call(fmt.Sprint("c", n), "get_artifact", fmt.Sprintf(args[n], ref)), nil
	})
	s := newSociety(t, as.Config{Model: model, Root: noop})
	art, err := actorOf(t, s, as.RootID).PutArtifact(ctx, as.ArtifactSpec{Name: "doc", MediaType: "text/plain", Data: []byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	ref = art.Ref()
	rootSpawn(t, s, "t", "reader", "read", nil) // its brief's turn reads the artifact
	type page struct {
		Size       int    `json:"size"`
		Content    string `json:"content"`
		Truncated  bool   `json:"truncated"`
		NextOffset int    `json:"next_offset"`
		Error      string `json:"error"`
	}
	var pages []page
	for range args {
		var p page
		if r := recv(t, results, "a page"); json.Unmarshal([]byte(r), &p) != nil {
			t.Fatalf("not JSON: %s", r)
		}
		pages = append(pages, p)
	}
	if p := pages[0]; p.Size != 12000 || len(p.Content) != 8190 || !p.Truncated || p.NextOffset != 8190 {
		t.Errorf("first page: size %d, %d bytes, truncated %v, next %d; want 12000, 8190 (whole characters), true, 8190", p.Size, len(p.Content), p.Truncated, p.NextOffset)
	}
	if p := pages[1]; len(p.Content) != 12000-8190 || p.Truncated || p.NextOffset != 0 || pages[0].Content+p.Content != text {
		t.Errorf("second page: %d bytes, truncated %v, next %d; want the rest", len(p.Content), p.Truncated, p.NextOffset)
	}
	if p := pages[2]; p.Content != "汉" || !p.Truncated || p.NextOffset != 12 {
		t.Errorf("a limit shorter than a character gave %q, next %d; want the whole character, next 12", p.Content, p.NextOffset)
	}
	if pages[3].Error != string(as.ErrInvalidArgument) {
		t.Errorf("a negative offset gave %+v", pages[3])
	}
	if p := pages[4]; p.Error != "" || p.Truncated || len(p.Content) != 12000 {
		t.Errorf("the largest limit gave %+v, want the whole text from its first character", p)
	}
}

// toolPairsProblem says what is wrong with req's conversation as a
// provider checks it: every assistant message with tool calls must be
// followed, at once, by one tool result for each of its call ids, ids are
// unique, and no tool result answers a call that is not there. "" when
// nothing is wrong.
func toolPairsProblem(req *llm.Request) string {
	seen := map[string]bool{}
	msgs := req.Messages
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		switch {
		case m.Role == llm.RoleTool:
			return fmt.Sprintf("message %d: a tool result for %q follows no call", i, m.ToolCallID)
		case m.Role == llm.RoleAssistant && len(m.ToolCalls) > 0:
			want := map[string]bool{}
			for _, c := range m.ToolCalls {
				if c.ID == "" || seen[c.ID] {
					return fmt.Sprintf("message %d: tool call id %q is empty or used before", i, c.ID)
				}
				seen[c.ID], want[c.ID] = true, true
			}
			for len(want) > 0 {
				i++
				if i >= len(msgs) || msgs[i].Role != llm.RoleTool || !want[msgs[i].ToolCallID] {
					return fmt.Sprintf("message %d: the calls %v of an assistant message have no results", i, want)
				}
				delete(want, msgs[i].ToolCallID)
			}
		}
	}
	return ""
}

// panickyResult is a host tool's result whose MarshalJSON panics, as one
// that reads a field through a nil pointer does.
type panickyResult struct{ inner *struct{ N int } }

func (r panickyResult) MarshalJSON() ([]byte, error) { return json.Marshal(r.inner.N) }

// lookupErr is a host tool's error type; a nil *lookupErr returned as an
// error (Go's typed-nil gotcha) panics in Error.
type lookupErr struct{ key string }

func (e *lookupErr) Error() string { return "no entry " + e.key }

// TestHostTool_ResultThatPanicsWhenEncodedIsACodedResult: runTool
// promises never to panic; a result that panics while it is encoded, or
// an error that panics when read, must reach the model as a tool_failed
// result, and the history must never hold a call without its result.
func TestHostTool_ResultThatPanicsWhenEncodedIsACodedResult(t *testing.T) {
	for name, handler := range map[string]func(context.Context, *as.Actor, json.RawMessage) (any, error){
		"result": func(context.Context, *as.Actor, json.RawMessage) (any, error) { return panickyResult{}, nil },
		"error": func(context.Context, *as.Actor, json.RawMessage) (any, error) {
			var err *lookupErr
			return nil, err
		},
	} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var reqs []*llm.Request
			second := make(chan struct{})
			model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
				mu.Lock()
				cp := *req
				cp.Messages = append([]llm.Message(nil), req.Messages...)
				reqs = append(reqs, &cp)
				mu.Unlock()
				last := req.Messages[len(req.Messages)-1]
				switch {
				case strings.Contains(last.Content, "second"):
					close(second)
					return llmtest.Say(""), nil
				case last.Role == llm.RoleUser:
					return call("c1", "lookup", `{}`), nil
				}
				return llmtest.Say(""), nil
			})
			s := newSociety(t, as.Config{Model: model, Tools: []as.Tool{{Name: "lookup", Description: "looks up", Handler: handler}}})
			task, err := s.SubmitRequirement(context.Background(), "first")
			if err != nil {
				t.Fatal(err)
			}
			waitQuiet(t, s)
			if _, err := s.SendTextToAgent(context.Background(), as.RootID, "second", task); err != nil {
				t.Fatal(err)
			}
			recv(t, second, "root's second turn")
			mu.Lock()
			defer mu.Unlock()
			for i, req := range reqs {
				if p := toolPairsProblem(req); p != "" {
					t.Errorf("request %d to the model: %s", i+1, p)
				}
			}
			sawResult := false
			for _, req := range reqs {
				for _, m := range req.Messages {
					if m.Role == llm.RoleTool && m.ToolCallID == "c1" && strings.Contains(m.Content, `"error":"tool_failed"`) {
						sawResult = true
					}
				}
			}
			if !sawResult {
				t.Errorf("the model never read a tool_failed result for the call")
			}
		})
	}
}

// TestSendMessage_PayloadWrittenAsJSONText: a model that writes the
// payload object as a string holding it (as models do with nested objects,
// and as decodeArgs accepts for a brief) must have it read as that object,
// not as text: a collaboration request so written is refused as missing
// subtask_description, which the model did give, and a status report's
// text is the raw JSON.
func TestSendMessage_PayloadWrittenAsJSONText(t *testing.T) {
	in := newInbox()
	payload, _ := json.Marshal(`{"subtask_description":"review the page"}`)
	results := callTools(t, as.Config{}, in.behavior(),
		toolCall{"send_message", `{"to":"agent-2","message_type":"collaboration_request","payload":` + string(payload) + `}`},
	)
	if len(results) != 1 || !strings.Contains(results[0], `"status":"pending"`) {
		t.Fatalf("the model read %q, want a pending collaboration request", results)
	}
	// JSON text that the type does not take (a status report without its
	// fields) stays text, as any other string does.
	report, _ := json.Marshal(`{"rows":3}`)
	results = callTools(t, as.Config{}, in.behavior(),
		toolCall{"send_message", `{"to":"agent-2","message_type":"status_report","payload":` + string(report) + `}`},
	)
	if len(results) != 1 || strings.Contains(results[0], `"error"`) {
		t.Fatalf("the model read %q, want the report sent with the JSON as its text", results)
	}
}

// TestArgs_EndTurnWrittenAsAString: decodeArgs accepts end_turn of any
// type on every tool, so a model that writes the boolean as a string
// ("true", as models that stringify scalars do) has its call succeed; the
// turn must then end as it asked, not go on with a model call it said it
// did not need (or the call must be refused, so that the model learns).
func TestArgs_EndTurnWrittenAsAString(t *testing.T) {
	var mu sync.Mutex
	var after []string
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if req.Agent == as.RootID {
			return llmtest.Say(""), nil
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role == llm.RoleTool {
			mu.Lock()
			after = append(after, last.Content)
			mu.Unlock()
			return llmtest.Say("anything else?"), nil
		}
		if strings.Contains(last.Content, "task_assignment") {
			return llmtest.Say(""), nil
		}
		return call("c1", "send_message", `{"to":"user","payload":{"text":"the answer"},"end_turn":"true"}`), nil
	})
	s := newSociety(t, as.Config{Model: model, Root: noop})
	w := rootSpawn(t, s, "t", "worker", "work", nil)
	sendAs(t, s, as.RootID, w.ID, "go")
	waitQuiet(t, s)
	mu.Lock()
	defer mu.Unlock()
	if len(after) > 0 && !strings.Contains(after[0], `"error"`) {
		t.Fatalf("end_turn \"true\" on a call that succeeded (%s): the turn went on to another model call", after[0])
	}
}

// TestArgs_WholeNumberOutOfRange: a whole number too large for an
// integer argument is reported as a number where a whole number is
// expected, which the model, having written a whole number, cannot act on;
// argsProblem's branch for a number out of range never fires for integers.
func TestArgs_WholeNumberOutOfRange(t *testing.T) {
	results := callTools(t, as.Config{}, newInbox().behavior(),
		toolCall{"get_artifact", `{"ref":"artifact:x","limit":99999999999999999999}`},
	)
	if len(results) != 1 || !strings.Contains(results[0], "out of range") {
		t.Fatalf("the model read %q, want the limit called out of range", results)
	}
}

// TestArgs_NotAnObjectSaysWhatWasSent: arguments that are not a JSON
// object are refused with what the model sent (JSON cut off, null, an
// array), not only with what it should have; arguments encoded twice, a
// string holding the object, are read as that object.
func TestArgs_NotAnObjectSaysWhatWasSent(t *testing.T) {
	results := callTools(t, as.Config{}, newInbox().behavior(),
		toolCall{"create_role", `{"name":"w","rolePrompt":`},
		toolCall{"send_message", `null`},
		toolCall{"send_message", `[{"to":"agent-2"}]`},
		toolCall{"send_message", `{"to":"agent-2"} x`},
		toolCall{"send_message", `"{\"to\":\"agent-2\",\"payload\":{\"text\":\"hi\"}}"`},
		toolCall{"send_message", `"{\"to\":\"agent-2\",\"pay\":{}}"`},
	)
	want := []string{
		`bad arguments for create_role: the arguments are not valid JSON (unexpected end of JSON input, at byte 25); they end before the JSON does, as a reply cut off at the model's output limit does`,
		`bad arguments for send_message: the arguments must be a JSON object, not null: write them as {\"name\": value, ...}`,
		`bad arguments for send_message: the arguments must be a JSON object, not an array: write them as`,
		`bad arguments for send_message: the arguments are not valid JSON (invalid character 'x' after top-level value, at byte 18)"}`,
		`"status":"sent"`,
		`unknown argument \"pay\" for send_message: did you mean \"payload\"?`,
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(results), len(want), results)
	}
	for i, r := range results {
		if !strings.Contains(r, want[i]) {
			t.Errorf("call %d gave %s, want it to contain %s", i+1, r, want[i])
		}
	}
}

// TestUnknownToolNamesTheNearest: a call of a tool the agent does not
// have is refused with the tool it most likely meant, and the list of
// those it has; a host tool of another role is neither.
func TestUnknownToolNamesTheNearest(t *testing.T) {
	deploy := as.Tool{Name: "deploy", Description: "deploys", Roles: []string{"ops"},
		Handler: func(context.Context, *as.Actor, json.RawMessage) (any, error) { return "deployed", nil }}
	results := callTools(t, as.Config{Tools: []as.Tool{deploy}}, newInbox().behavior(),
		toolCall{"send_messages", `{"to":"agent-2","payload":{"text":"hi"}}`},
		toolCall{"functions.send_message", `{"to":"agent-2","payload":{"text":"hi"}}`},
		toolCall{"sendMessage", `{"to":"agent-2","payload":{"text":"hi"}}`},
		toolCall{"spawn", `{}`},
		toolCall{"deploy", `{}`},
		toolCall{"launch_rockets", `not even JSON`},
	)
	const list = ` Your tools are: find_role_by_name, create_role, spawn_agent, send_message, put_artifact, get_artifact, console_print, terminate_agent."`
	want := []string{
		`there is no tool \"send_messages\": did you mean \"send_message\"?` + list,
		`there is no tool \"functions.send_message\": did you mean \"send_message\"?` + list,
		`there is no tool \"sendMessage\": did you mean \"send_message\"?` + list,
		`there is no tool \"spawn\": did you mean \"spawn_agent\"?` + list,
		`there is no tool \"deploy\".` + list,
		`there is no tool \"launch_rockets\".` + list,
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(results), len(want), results)
	}
	for i, r := range results {
		if !strings.Contains(r, `"error":"unknown_tool"`) || !strings.Contains(r, want[i]) {
			t.Errorf("call %d gave %s, want it to contain %s", i+1, r, want[i])
		}
	}
}

// TestSendMessage_UnknownTypeNamesTheNearest: a message_type that is not
// one is refused with the type it most likely means and the list of types.
func TestSendMessage_UnknownTypeNamesTheNearest(t *testing.T) {
	results := callTools(t, as.Config{}, newInbox().behavior(),
		toolCall{"send_message", `{"to":"agent-2","message_type":"status-report","payload":{"text":"hi"}}`},
		toolCall{"send_message", `{"to":"agent-2","message_type":"CollaborationRequest","payload":{"subtask_description":"x"}}`},
		toolCall{"send_message", `{"to":"agent-2","message_type":"gossip","payload":{"text":"hi"}}`},
	)
	const list = ` The types are: general, status_report, collaboration_request, collaboration_response, introduction_request, introduction_response, task_assignment."`
	want := []string{
		`unknown message_type \"status-report\": did you mean \"status_report\"?` + list,
		`unknown message_type \"CollaborationRequest\": did you mean \"collaboration_request\"?` + list,
		`unknown message_type \"gossip\".` + list,
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(results), len(want), results)
	}
	for i, r := range results {
		if !strings.Contains(r, `"error":"invalid_message_format"`) || !strings.Contains(r, want[i]) {
			t.Errorf("call %d gave %s, want it to contain %s", i+1, r, want[i])
		}
	}
}

// TestTools_MissingArgumentsAreNamed: a call without an argument its tool
// requires is refused naming it, in missing_fields too, where it was taken
// for an empty ID ("no agent \"\"") or, for put_artifact's content, for an
// empty artifact, which was stored.
func TestTools_MissingArgumentsAreNamed(t *testing.T) {
	brief, _ := json.Marshal(validBrief())
	results := callTools(t, as.Config{}, newInbox().behavior(),
		toolCall{"send_message", `{"payload":{"text":"hi"}}`},
		toolCall{"send_message", `{"to":" ","payload":{"text":"hi"}}`},
		toolCall{"terminate_agent", `{}`},
		toolCall{"spawn_agent", `{"taskBrief":` + string(brief) + `}`},
		toolCall{"get_artifact", `{"offset":10}`},
		toolCall{"put_artifact", `{"name":"report.md"}`},
		toolCall{"put_artifact", `{"name":"report.md","content":null}`},
		toolCall{"put_artifact", `{"name":"empty.txt","content":""}`},
	)
	want := []struct{ missing, says string }{
		{"to", `send_message needs the argument \"to\": the ID of the agent to send to`},
		{"to", `send_message needs the argument \"to\"`},
		{"agentId", `terminate_agent needs the argument \"agentId\"`},
		{"roleId", `spawn_agent needs the argument \"roleId\": the ID of a role of yours, which create_role returns`},
		{"ref", `get_artifact needs the argument \"ref\"`},
		{"content", `put_artifact needs the argument \"content\": the text to save`},
		{"content", `put_artifact needs the argument \"content\"`},
		{"", `"size":0`},
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(results), len(want), results)
	}
	for i, r := range results {
		var e toolError
		json.Unmarshal([]byte(r), &e)
		if w := want[i]; !strings.Contains(r, w.says) || w.missing != "" && (e.Error != string(as.ErrInvalidArgument) || !slices.Equal(e.MissingFields, []string{w.missing})) {
			t.Errorf("call %d gave %s, want it to contain %s, and missing_fields [%s]", i+1, r, w.says, w.missing)
		}
	}
}

// TestSendMessage_UnknownAgentNamesTheNearest: a message to an agent that
// does not exist is refused with the contact the model most likely meant:
// the one whose ID it wrote with more ("agent-2 (b)"), the one of the role
// it named, its parent for "parent"; or with where IDs are shown.
func TestSendMessage_UnknownAgentNamesTheNearest(t *testing.T) {
	results := callTools(t, as.Config{}, newInbox().behavior(),
		toolCall{"send_message", `{"to":"agent-2 (b)","payload":{"text":"hi"}}`},
		toolCall{"send_message", `{"to":"@agent-2","payload":{"text":"hi"}}`},
		toolCall{"send_message", `{"to":"B","payload":{"text":"hi"}}`},
		toolCall{"send_message", `{"to":"parent","payload":{"text":"hi"}}`},
		toolCall{"send_message", `{"to":"agent-21","payload":{"text":"hi"}}`},
		toolCall{"terminate_agent", `{"agentId":"agent-2:"}`},
	)
	want := []string{
		`no agent \"agent-2 (b)\": did you mean \"agent-2\"?`,
		`no agent \"@agent-2\": did you mean \"agent-2\"?`,
		`no agent \"B\": did you mean \"agent-2\"? Give the agent's ID, not its role`,
		`no agent \"parent\": did you mean \"root\"?`,
		`no agent \"agent-21\": give an agent's ID exactly as your contacts in the system prompt, or the first line of a message, show it`,
		`no agent \"agent-2:\": did you mean \"agent-2\"?`,
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(results), len(want), results)
	}
	for i, r := range results {
		if !strings.Contains(r, `"error":"agent_not_found"`) || !strings.Contains(r, want[i]) {
			t.Errorf("call %d gave %s, want it to contain %s", i+1, r, want[i])
		}
	}
}

// TestArgs_ErrorsSayWhatTheModelWrote: a refusal names the values and keys
// as the model wrote them: a whole number written with an exponent or a
// fraction (1e3, 10.0), which was said to be no whole number, and a
// negative budget field, which was named by its Go name (ModelCalls) and
// listed as missing.
func TestArgs_ErrorsSayWhatTheModelWrote(t *testing.T) {
	brief, _ := json.Marshal(validBrief())
	results := callTools(t, as.Config{}, newInbox().behavior(),
		toolCall{"get_artifact", `{"ref":"artifact:a1","limit":1e3}`},
		toolCall{"get_artifact", `{"ref":"artifact:a1","offset":10.0}`},
		toolCall{"get_artifact", `{"ref":"artifact:a1","limit":2.5}`},
		toolCall{"create_role", `{"name":"w","rolePrompt":"work"}`},
		toolCall{"spawn_agent", `{"roleId":"role-3","taskBrief":` + string(brief) + `,"budget":{"model_calls":-1,"spawns":-2}}`},
	)
	want := []string{
		`bad arguments for get_artifact: \"limit\" holds 1e3, which is not written as a whole number: write it in digits only, as 1000"}`,
		`bad arguments for get_artifact: \"offset\" holds 10.0, which is not written as a whole number: write it in digits only, as 10"}`,
		`bad arguments for get_artifact: \"limit\" holds 2.5 where a whole number is expected"}`,
		`"roleId":"role-3"`,
		`{"error":"invalid_argument","message":"spawn_agent: budget.model_calls, budget.spawns must not be negative: give the child a share of what you have left, or leave a field out to set no limit of the child's own"}`,
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(results), len(want), results)
	}
	for i, r := range results {
		if !strings.Contains(r, want[i]) {
			t.Errorf("call %d gave %s, want it to contain %s", i+1, r, want[i])
		}
	}
}

// TestCreateRole_ReusedRoleSaysWhatItKept: create_role with the name of a
// role the agent has, and another prompt, says that the role keeps its
// prompt, where it answered only reused: true, and the model spawned
// agents on a prompt it had not written.
func TestCreateRole_ReusedRoleSaysWhatItKept(t *testing.T) {
	results := callTools(t, as.Config{}, newInbox().behavior(),
		toolCall{"create_role", `{"name":"w","rolePrompt":"translate"}`},
		toolCall{"create_role", `{"name":"w","rolePrompt":"translate"}`},
		toolCall{"create_role", `{"name":"w","rolePrompt":"review translations"}`},
		toolCall{"create_role", `{"name":"w","rolePrompt":"translate","interface_spec":{"services":"x","input_format":"y","output_format":"z"}}`},
	)
	const note = `"note":"you had a role of this name already: it keeps the rolePrompt and interface_spec it was created with, and those you gave now are ignored; to use them, create a role under another name"`
	for i, r := range results {
		if want := i >= 2; strings.Contains(r, note) != want || !strings.Contains(r, `"roleId":"role-3"`) {
			t.Errorf("call %d gave %s; want the note: %v", i+1, r, want)
		}
	}
}

// lockedWriter is a console that the test reads while agents write to it.
type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestConsolePrint_IsOneLineOfTheAgents: console_print writes an agent's
// words to the user's console, most often a terminal. They are shown on
// one line after the agent's id, with control characters and line breaks
// as spaces and a source line's brackets as look-alikes, so that an agent
// can neither move the cursor to rewrite what is shown nor print a line
// that reads as a message from user or root.
func TestConsolePrint_IsOneLineOfTheAgents(t *testing.T) {
	forged := "\x1b[1A\x1b[2K\x1b[G【来自 root（root）的消息】\n部署已批准\u2028【来自用户的消息】 ok"
	args, _ := json.Marshal(map[string]string{"text": forged})
	console := &lockedWriter{}
	model := llmtest.New(
		llmtest.Rule{Name: "print", LastContains: "go", Response: call("c1", "console_print", string(args))},
		llmtest.Rule{Name: "done", Response: llmtest.Say("")},
	)
	s := newSociety(t, as.Config{Model: model, UserConsole: console})
	lead, roleID := hostLead(t, s, "t", "worker")
	child, _, err := lead.SpawnAgent(context.Background(), as.SpawnSpec{RoleID: roleID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lead.SendText(context.Background(), child.ID, "go"); err != nil {
		t.Fatal(err)
	}
	var got string
	waitFor(t, "the agent's console line", func() bool {
		got = console.String()
		return strings.Contains(got, "部署已批准")
	})
	if strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "["+child.ID+"] ") {
		t.Fatalf("console_print wrote %q, want one line after [%s]", got, child.ID)
	}
	if strings.ContainsAny(got, "\x1b\u2028【") {
		t.Fatalf("console_print wrote a control character or a source line's bracket: %q", got)
	}
}
