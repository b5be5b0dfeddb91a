package agentsociety

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"agentsociety/llm"
)

// Tool is a host tool: a Go function that model-driven agents may call like
// a built-in one. [NewTool] makes one whose arguments are decoded into a Go
// type; package agentsociety/toolset has ready-made ones.
type Tool struct {
	// Name is what the model calls: 1 to 64 ASCII letters, digits, '_' or
	// '-', and not the name of a built-in tool.
	Name string
	// Description tells the model what the tool does, when to use it and
	// when not to.
	Description string
	// Parameters is the JSON Schema of the arguments object. Nil means an
	// object with no declared properties.
	Parameters json.RawMessage
	// Roles limits the tool to agents of the roles with these names. Empty
	// means every model-driven agent, root included.
	Roles []string
	// Handler runs the tool for the agent self with the arguments as the
	// model wrote them (valid JSON, not checked against Parameters). Its
	// result is encoded as JSON for the model; an error is returned to the
	// model as {"error": ..., "message": ...}, with the code of an *Error.
	Handler func(ctx context.Context, self *Actor, args json.RawMessage) (any, error)
}

// NewTool returns a host tool named name whose Handler decodes the model's
// arguments into a value of type A, as encoding/json does (fields A does not
// declare are ignored), and calls fn with it. schema is the tool's
// Parameters: the JSON Schema that tells the model what A looks like.
//
// Arguments that do not decode (malformed JSON, or a value of the wrong
// type, such as a number where A has a string) do not reach fn: the call
// fails with an [*Error] of code [ErrInvalidArgument] whose message names
// the tool and what was wrong, so that the model can correct its call.
// Arguments that are empty decode as the zero A. What the arguments mean is
// fn's to check: fn's errors reach the model as [Tool.Handler] describes.
//
// A nil fn gives a Tool without a Handler, which New refuses.
func NewTool[A any](name, description string, schema json.RawMessage, fn func(ctx context.Context, self *Actor, args A) (any, error)) Tool {
	t := Tool{Name: name, Description: description, Parameters: schema}
	if fn != nil {
		t.Handler = func(ctx context.Context, self *Actor, raw json.RawMessage) (any, error) {
			var args A
			if err := decodeLenient(name, raw, &args); err != nil {
				return nil, err
			}
			return fn(ctx, self, args)
		}
	}
	return t
}

// builtin is a tool every model-driven agent has. Its description, and
// those of its parameters, are the society's language's (see language.go):
// params is its JSON Schema with a placeholder, {name}, where the
// description of parameter name goes.
type builtin struct {
	name   string
	params string
	run    func(ctx context.Context, x *Actor, args json.RawMessage) (any, error)
}

// The built-in tools, in the order a model sees them. Schemas and
// descriptions are terse on purpose: they are sent with every model call.
// What the system prompt already says (contacts, the rules of the society)
// is not repeated here, and no tool only reads what the prompt shows.
var builtins = []builtin{
	{"find_role_by_name", `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`, toolFindRole},
	{"create_role", `{"type":"object","properties":{"name":{"type":"string"},"rolePrompt":{"type":"string"},"interface_spec":{"type":"object","description":{interface_spec}}},"required":["name","rolePrompt"]}`, toolCreateRole},
	{"spawn_agent", `{"type":"object","properties":{"roleId":{"type":"string"},"taskBrief":{"type":"object","properties":{"objective":{"type":"string"},"constraints":{"type":"array","items":{"type":"string"}},"inputs":{"type":"string"},"outputs":{"type":"string"},"completion_criteria":{"type":"string"}},"required":["objective","constraints","inputs","outputs","completion_criteria"]},"budget":{"type":"object"},"end_turn":{"type":"boolean"}},"required":["roleId","taskBrief"]}`, toolSpawn},
	{"send_message", `{"type":"object","properties":{"to":{"type":"string"},"message_type":{"type":"string"},"payload":{"type":"object"},"end_turn":{"type":"boolean"}},"required":["to","payload"]}`, toolSend},
	{"put_artifact", `{"type":"object","properties":{"name":{"type":"string"},"media_type":{"type":"string"},"content":{"type":"string"}},"required":["name","content"]}`, toolPutArtifact},
	{"get_artifact", `{"type":"object","properties":{"ref":{"type":"string"},"offset":{"type":"integer"},"limit":{"type":"integer"}},"required":["ref"]}`, toolGetArtifact},
	{"console_print", `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`, toolConsolePrint},
	{"terminate_agent", `{"type":"object","properties":{"agentId":{"type":"string"}},"required":["agentId"]}`, toolTerminate},
}

func builtinNamed(name string) *builtin {
	for i := range builtins {
		if builtins[i].name == name {
			return &builtins[i]
		}
	}
	return nil
}

// checkTools validates the host tools of a Config.
func checkTools(tools []Tool) error {
	seen := map[string]bool{}
	for i, t := range tools {
		switch {
		case !validToolName(t.Name):
			return fmt.Errorf("agentsociety: Config.Tools[%d]: name %q must be 1-64 letters, digits, '_' or '-'", i, t.Name)
		case builtinNamed(t.Name) != nil:
			return fmt.Errorf("agentsociety: Config.Tools[%d]: %q is a built-in tool", i, t.Name)
		case seen[t.Name]:
			return fmt.Errorf("agentsociety: Config.Tools[%d]: %q is registered twice", i, t.Name)
		case t.Handler == nil:
			return fmt.Errorf("agentsociety: Config.Tools[%d] %q has no Handler", i, t.Name)
		case t.Parameters != nil && !isJSONObject(t.Parameters):
			return fmt.Errorf("agentsociety: Config.Tools[%d] %q: Parameters must be a JSON Schema object", i, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

func validToolName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// toolsFor returns the tool definitions an agent of role roleName sees,
// the same slice for every agent of the role: callers must not modify it.
func (s *Society) toolsFor(roleName string) []llm.Tool {
	if tools, ok := s.roleTools.Load(roleName); ok {
		return tools.([]llm.Tool)
	}
	tools, _ := s.roleTools.LoadOrStore(roleName, s.buildTools(roleName))
	return tools.([]llm.Tool)
}

// buildTools returns the tool definitions an agent of role roleName sees.
func (s *Society) buildTools(roleName string) []llm.Tool {
	out := make([]llm.Tool, 0, len(builtins)+len(s.cfg.Tools))
	out = append(out, s.lang.tools...)
	for _, t := range s.cfg.Tools {
		if len(t.Roles) == 0 || slices.Contains(t.Roles, roleName) {
			params := t.Parameters
			if params == nil {
				params = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			out = append(out, llm.Tool{Name: t.Name, Description: t.Description, Parameters: params})
		}
	}
	return out
}

// runTool runs one tool call for x and returns the JSON the model reads,
// and the coded error the call failed with (nil when it succeeded). It
// never panics: every failure becomes a coded error result.
func (s *Society) runTool(ctx context.Context, x *Actor, call llm.ToolCall) (result string, coded *Error) {
	start := time.Now()
	args := bytes.TrimSpace(call.Arguments)
	if len(args) == 0 {
		args = []byte("{}")
	}
	object := isJSONObject(args)
	out, err := s.callTool(ctx, x, call.Name, args, object)
	result, coded = s.toolOutcome(ctx, x, call.Name, out, err)
	if !s.events.off {
		e := Event{Kind: EventToolCalled, Task: x.taskID, Agent: x.ID(), Turn: x.turn.id(), Name: call.Name, Duration: time.Since(start)}
		if len(bytes.TrimSpace(call.Arguments)) > 0 && (object || json.Valid(call.Arguments)) {
			e.Args = call.Arguments // blank arguments, read as {}, are no JSON to show
		}
		if coded != nil {
			e.Code = coded.Code
		}
		s.emit(e)
	}
	return result, coded
}

// toolOutcome encodes a tool's result or error for the model, with the
// coded error (nil on success). A result whose encoding panics (a
// MarshalJSON that does) or an error whose Error method panics (a typed
// nil) fails the call with ErrToolFailed: the panic must not leave the
// call without a result in the history.
func (s *Society) toolOutcome(ctx context.Context, x *Actor, name string, out any, err error) (result string, coded *Error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.LogAttrs(ctx, slog.LevelError, "tool result panicked", slog.String("tool", name), slog.String("agent", x.ID()), slog.Any("panic", r))
			coded = &Error{Code: ErrToolFailed, Message: fmt.Sprintf("the tool %s failed", name)}
			result = encodeResult(nil, coded)
		}
	}()
	if err != nil {
		coded = toolError(err)
		return encodeResult(nil, coded), coded
	}
	return encodeResult(out, nil), nil
}

// callTool runs tool name for x with args (object says whether they are a
// JSON object), turning a panic into an error.
func (s *Society) callTool(ctx context.Context, x *Actor, name string, args json.RawMessage, object bool) (out any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.LogAttrs(ctx, slog.LevelError, "tool panicked", slog.String("tool", name), slog.String("agent", x.ID()), slog.Any("panic", r))
			out, err = nil, &Error{Code: ErrToolFailed, Message: fmt.Sprintf("the tool %s failed", name)}
		}
	}()
	var run func(context.Context, *Actor, json.RawMessage) (any, error)
	if b := builtinNamed(name); b != nil {
		run = b.run
	} else if t := s.hostTool(name, x.a.roleName()); t != nil {
		run = t.Handler
	} else {
		return nil, s.unknownTool(name, x.a.roleName())
	}
	if !object {
		if args, err = argumentsObject(name, args); err != nil {
			return nil, err
		}
	}
	return run(ctx, x, args)
}

// argumentsObject returns the JSON object that args, which are not one,
// stand for: a string holding one, as a model that encodes its arguments
// twice writes them. Anything else is refused with an ErrInvalidArgument
// that says what the model sent: JSON that is not valid (cut off, most
// often, by the model's output limit), or a value of another kind.
func argumentsObject(tool string, args json.RawMessage) (json.RawMessage, error) {
	var text string
	if json.Unmarshal(args, &text) == nil && isJSONObject([]byte(text)) {
		return json.RawMessage(text), nil
	}
	var obj map[string]json.RawMessage
	err := json.Unmarshal(args, &obj)
	var problem string
	var syntax *json.SyntaxError
	switch {
	case err == nil: // null, which a map takes
		problem = "the arguments must be a JSON object, not null"
	case errors.As(err, &syntax) && syntax.Error() == "unexpected end of JSON input":
		problem = argsProblem(err) + "; they end before the JSON does, as a reply cut off at the model's output limit does: make the call again, whole (if a long value did not fit, make it shorter or split it across calls)"
	default:
		problem = argsProblem(err)
	}
	if err == nil || !errors.As(err, &syntax) {
		problem += `: write them as {"name": value, ...}, with the names of the tool's parameters`
	}
	return nil, &Error{Code: ErrInvalidArgument, Message: "bad arguments for " + tool + ": " + problem}
}

// unknownTool refuses a call of the tool name, which an agent of role
// roleName does not have, naming the tool of its that name most likely
// means (a name with a namespace, "functions.send_message", or written
// otherwise, "sendMessage", "spawn") and listing those it has.
func (s *Society) unknownTool(name, roleName string) *Error {
	var names []string
	for _, t := range s.toolsFor(roleName) {
		names = append(names, t.Name)
	}
	msg := "there is no tool " + strconvQuote(name)
	bare := name
	if i := strings.LastIndexAny(bare, ".:/"); i >= 0 {
		bare = bare[i+1:]
	}
	if near := nearestKey(bare, names); near != "" {
		msg += ": did you mean " + strconvQuote(near) + "?"
	} else {
		msg += "."
	}
	return &Error{Code: ErrUnknownTool, Message: msg + " Your tools are: " + strings.Join(names, ", ") + "."}
}

func (s *Society) hostTool(name, roleName string) *Tool {
	for i, t := range s.cfg.Tools {
		if t.Name == name && (len(t.Roles) == 0 || slices.Contains(t.Roles, roleName)) {
			return &s.cfg.Tools[i]
		}
	}
	return nil
}

// encodeResult renders a tool's result or error as the JSON a model reads.
func encodeResult(out any, err error) string {
	var v any = out
	if err != nil {
		v = toolError(err)
	}
	b, merr := json.Marshal(v)
	if merr != nil {
		b, _ = json.Marshal(&Error{Code: ErrToolFailed, Message: "the tool's result does not encode as JSON: " + merr.Error()})
	}
	return string(b)
}

// toolError keeps the code of a coded error, wrapped or bare, and gives any
// other error the code ErrToolFailed.
func toolError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		if e.Error() != err.Error() {
			c := *e
			c.Message = err.Error() // keep the wrapping context the model may need
			c.Err = nil
			return &c
		}
		return e
	}
	var code Code
	if errors.As(err, &code) {
		return &Error{Code: code, Message: err.Error()}
	}
	return &Error{Code: ErrToolFailed, Message: err.Error()}
}

func toolFindRole(_ context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		Name string `json:"name"`
	}
	if err := decodeArgs("find_role_by_name", args, &a); err != nil {
		return nil, err
	}
	roles := x.FindRoleByName(a.Name)
	out := make([]roleResult, len(roles))
	for i, r := range roles {
		out[i] = roleResult{RoleID: r.ID, Name: r.Name, CreatedBy: r.CreatedBy, Yours: r.CreatedBy == x.ID(), InterfaceSpec: r.InterfaceSpec}
	}
	return map[string]any{"roles": out}, nil
}

type roleResult struct {
	RoleID        string         `json:"roleId"`
	Name          string         `json:"name"`
	CreatedBy     string         `json:"createdBy"`
	Yours         bool           `json:"yours"`
	InterfaceSpec *InterfaceSpec `json:"interface_spec,omitempty"`
	Reused        *bool          `json:"reused,omitempty"`
	Note          string         `json:"note,omitempty"`
}

func toolCreateRole(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		Name          string         `json:"name"`
		RolePrompt    string         `json:"rolePrompt"`
		InterfaceSpec *InterfaceSpec `json:"interface_spec"`
	}
	if err := decodeArgs("create_role", args, &a); err != nil {
		return nil, err
	}
	r, reused, err := x.CreateRole(ctx, RoleSpec{Name: a.Name, Prompt: a.RolePrompt, InterfaceSpec: a.InterfaceSpec})
	if err != nil {
		return nil, err
	}
	out := roleResult{RoleID: r.ID, Name: r.Name, CreatedBy: r.CreatedBy, Yours: true, Reused: &reused}
	if reused && (r.Prompt != a.RolePrompt || a.InterfaceSpec != nil && !a.InterfaceSpec.equal(r.InterfaceSpec)) {
		out.Note = "you had a role of this name already: it keeps the rolePrompt and interface_spec it was created with, and those you gave now are ignored; to use them, create a role under another name"
	}
	return out, nil
}

func toolSpawn(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		RoleID        string     `json:"roleId"`
		TaskBrief     *TaskBrief `json:"taskBrief"`
		ParentAgentID string     `json:"parentAgentId"`
		Budget        *Budget    `json:"budget"`
	}
	if err := decodeArgs("spawn_agent", args, &a); err != nil {
		return nil, err
	}
	if blank(a.RoleID) {
		return nil, missingArgument("spawn_agent", "roleId", "the ID of a role of yours, which create_role returns")
	}
	if err := checkBudgetArg(a.Budget); err != nil {
		return nil, err
	}
	c, reused, err := x.spawn(ctx, SpawnSpec{RoleID: a.RoleID, Brief: a.TaskBrief, ParentID: a.ParentAgentID, Budget: a.Budget}, true)
	if err != nil {
		return nil, err
	}
	return spawnResult{c.ID, reused, c.RoleID, c.TaskID}, nil
}

// checkBudgetArg refuses a budget argument with a negative field, naming
// the fields as the model wrote them, under budget, and what to do.
func checkBudgetArg(b *Budget) error {
	if b == nil {
		return nil
	}
	bad := b.negative()
	if bad == nil {
		return nil
	}
	for i := range bad {
		bad[i] = "budget." + bad[i]
	}
	return &Error{Code: ErrInvalidArgument, Message: "spawn_agent: " + strings.Join(bad, ", ") + " must not be negative: give the child a share of what you have left, or leave a field out to set no limit of the child's own"}
}

// missingArgument refuses a call of tool without its argument name, which
// the tool requires: what describes the value it wants.
func missingArgument(tool, name, what string) error {
	return &Error{Code: ErrInvalidArgument, Message: tool + " needs the argument " + strconvQuote(name) + ": " + what, MissingFields: []string{name}}
}

// withIDHint adds to err, when it says that there is no agent id, which
// of x's contacts the model most likely meant: the one whose ID id holds
// ("agent-2 (developer)", "@agent-2"), those of the role id names
// ("developer"), or x's parent ("parent"); or, failing those, where the
// IDs are to be found. An invented ID is a model's commonest slip.
func withIDHint(x *Actor, id string, err error) error {
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrAgentNotFound || e.AgentID != id {
		return err
	}
	var hint string
	var ofRole []string
	contacts := x.Contacts()
	for _, c := range contacts {
		if containsID(id, c.ID) {
			hint = "did you mean " + strconvQuote(c.ID) + "?"
			break
		}
		if normKey(id) == normKey(c.Role) || c.Source == SourceParent && strings.EqualFold(id, string(c.Source)) {
			ofRole = append(ofRole, c.ID)
		}
	}
	switch {
	case hint != "":
	case len(ofRole) == 1:
		hint = "did you mean " + strconvQuote(ofRole[0]) + "? Give the agent's ID, not its role"
	case len(ofRole) > 1:
		hint = "give one agent's ID, not a role: those of yours in it are " + strings.Join(ofRole, ", ")
	default:
		hint = "give an agent's ID exactly as your contacts in the system prompt, or the first line of a message, show it"
	}
	c := *e
	c.Message += ": " + hint
	return &c
}

// containsID reports whether s holds id as a whole word: "agent-2 (b)"
// holds agent-2, "agent-21" does not.
func containsID(s, id string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], id)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(id)
		if (start == 0 || !isIDByte(s[start-1])) && (end == len(s) || !isIDByte(s[end])) {
			return true
		}
		i = start + 1
	}
}

func isIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// spawnResult is what spawn_agent answers, its keys in the order in which
// a map of them would encode.
type spawnResult struct {
	AgentID string `json:"agentId"`
	Reused  bool   `json:"reused"`
	RoleID  string `json:"roleId"`
	TaskID  string `json:"taskId"`
}

func toolSend(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		To          string          `json:"to"`
		MessageType MessageType     `json:"message_type"`
		Payload     json.RawMessage `json:"payload"`
	}
	if err := decodeArgs("send_message", args, &a); err != nil {
		return nil, err
	}
	if blank(a.To) {
		return nil, missingArgument("send_message", "to", "the ID of the agent to send to")
	}
	if err := checkMessageType(a.MessageType); err != nil {
		return nil, err
	}
	// Models often pass a bare string as the payload: take it as the text,
	// or, when it holds a JSON object that the message's type takes (the
	// payload written as JSON text), as that object.
	if p := bytes.TrimSpace(a.Payload); len(p) > 0 && p[0] == '"' {
		var text string
		if json.Unmarshal(p, &text) == nil {
			a.Payload = Text(text)
			if obj := json.RawMessage(text); isJSONObject(obj) {
				if _, err := checkPayload(cmp.Or(a.MessageType, General), obj); err == nil {
					a.Payload = obj
				}
			}
		}
	}
	m, err := x.Send(ctx, Outgoing{To: a.To, Type: a.MessageType, Payload: a.Payload})
	if err != nil {
		return nil, withIDHint(x, a.To, err)
	}
	out := map[string]any{"messageId": m.ID, "to": m.To, "message_type": m.Type, "status": "sent"}
	if m.Type == CollaborationRequest {
		var p CollaborationRequestPayload
		if m.Decode(&p) == nil {
			out["request_id"] = p.RequestID
			out["status"] = StatusPending
		}
	}
	return out, nil
}

// messageTypes are the types send_message takes, in the order its
// description gives them.
var messageTypes = []string{string(General), string(StatusReport), string(CollaborationRequest), string(CollaborationResponse),
	string(IntroductionRequest), string(IntroductionResponse), string(TaskAssignment)}

// checkMessageType refuses a message_type that is not one, naming the type
// it most likely means ("status-report", "StatusReport") and the types
// there are. "" is general.
func checkMessageType(t MessageType) error {
	if t == "" || slices.Contains(messageTypes, string(t)) {
		return nil
	}
	msg := "unknown message_type " + strconvQuote(string(t))
	if near := nearestKey(string(t), messageTypes); near != "" {
		msg += ": did you mean " + strconvQuote(near) + "?"
	} else {
		msg += "."
	}
	return &Error{Code: ErrInvalidMessageFormat, Message: msg + " The types are: " + strings.Join(messageTypes, ", ") + ".", MessageType: t}
}

func toolPutArtifact(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		Name      string  `json:"name"`
		MediaType string  `json:"media_type"`
		Content   *string `json:"content"`
	}
	if err := decodeArgs("put_artifact", args, &a); err != nil {
		return nil, err
	}
	if a.Content == nil { // "" is an empty artifact, on purpose
		return nil, missingArgument("put_artifact", "content", "the text to save")
	}
	if a.MediaType == "" {
		a.MediaType = "text/plain; charset=utf-8"
	}
	art, err := x.PutArtifact(ctx, ArtifactSpec{Name: a.Name, MediaType: a.MediaType, Data: []byte(*a.Content)})
	if err != nil {
		return nil, err
	}
	return map[string]any{"ref": art.Ref(), "name": art.Name, "size": art.Size}, nil
}

// artifactPage is how many bytes get_artifact returns when the model does
// not say: enough for a page of code or prose, small enough for a context.
const artifactPage = 8192

func toolGetArtifact(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		Ref    string `json:"ref"`
		Offset int64  `json:"offset"`
		Limit  int64  `json:"limit"`
	}
	if err := decodeArgs("get_artifact", args, &a); err != nil {
		return nil, err
	}
	if blank(a.Ref) {
		return nil, missingArgument("get_artifact", "ref", "the artifact's reference, artifact:<id>")
	}
	if a.Offset < 0 || a.Limit < 0 {
		return nil, &Error{Code: ErrInvalidArgument, Message: "offset and limit must not be negative"}
	}
	if a.Limit == 0 {
		a.Limit = artifactPage
	}
	art, data, err := x.GetArtifact(ctx, a.Ref)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"ref": art.Ref(), "name": art.Name, "media_type": art.MediaType, "size": art.Size, "createdBy": art.CreatedBy}
	page, start, next := artifactSlice(data, a.Offset, a.Limit)
	if start > 0 {
		out["offset"] = start
	}
	out["truncated"] = next > 0
	if next > 0 {
		out["next_offset"] = next
	}
	if utf8.Valid(data) {
		out["content"] = string(page)
	} else {
		out["content_base64"] = page // encoding/json writes []byte as base64
	}
	return out, nil
}

// artifactSlice returns up to limit bytes of data from offset, where they
// start, and the offset of what follows them (0 when nothing does). In UTF-8 text both
// ends fall on character boundaries (an offset inside a character starts
// at the character), so no character is split between pages.
func artifactSlice(data []byte, offset, limit int64) (page []byte, start, next int64) {
	n := int64(len(data))
	if offset >= n {
		return nil, n, 0
	}
	text := utf8.Valid(data)
	for text && offset > 0 && !utf8.RuneStart(data[offset]) {
		offset-- // the start of the character offset falls in
	}
	end := n
	if limit < n-offset { // offset+limit may not fit in an int64
		end = offset + limit
	}
	if end < n && text {
		for end > offset && !utf8.RuneStart(data[end]) {
			end--
		}
		if end == offset { // limit is shorter than one rune: take the rune
			_, size := utf8.DecodeRune(data[offset:])
			end = offset + int64(size)
		}
	}
	if end < n {
		next = end
	}
	return data[offset:end], offset, next
}

func toolConsolePrint(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		Text string `json:"text"`
	}
	if err := decodeArgs("console_print", args, &a); err != nil {
		return nil, err
	}
	s := x.s
	s.log.LogAttrs(ctx, slog.LevelInfo, "console", slog.String("agent", x.ID()), slog.String("text", a.Text))
	s.emit(Event{Kind: EventConsole, Task: x.taskID, Agent: x.ID(), Turn: x.turn.id(), Detail: a.Text})
	s.user.print("[" + x.ID() + "] " + oneLine(a.Text) + "\n")
	return map[string]any{"ok": true}, nil
}

func toolTerminate(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		AgentID string `json:"agentId"`
	}
	if err := decodeArgs("terminate_agent", args, &a); err != nil {
		return nil, err
	}
	if blank(a.AgentID) {
		return nil, missingArgument("terminate_agent", "agentId", "the ID of the descendant to terminate")
	}
	if err := x.Terminate(ctx, a.AgentID); err != nil {
		return nil, withIDHint(x, a.AgentID, err)
	}
	return map[string]any{"agentId": a.AgentID, "status": StatusTerminating}, nil
}
