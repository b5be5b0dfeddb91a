package agentsociety

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
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
			if err := decodeArgs(name, raw, &args); err != nil {
				return nil, err
			}
			return fn(ctx, self, args)
		}
	}
	return t
}

// builtin is a tool every model-driven agent has.
type builtin struct {
	def llm.Tool
	run func(ctx context.Context, x *Actor, args json.RawMessage) (any, error)
}

// The built-in tools, in the order a model sees them. Schemas and
// descriptions are terse on purpose: they are sent with every model call.
var builtins = []builtin{
	{llm.Tool{Name: "find_role_by_name", Description: "按岗位名查找已有岗位（所有创建者的），返回 roleId 与 createdBy。创建岗位前先查；只能在 createdBy 是你自己的岗位上 spawn_agent。",
		Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)}, toolFindRole},
	{llm.Tool{Name: "create_role", Description: "创建你自己的子岗位（同名则复用你已有的）。rolePrompt 写清职责、输入输出、完成标准、向谁汇报。只在需要分工时用。",
		Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"rolePrompt":{"type":"string"},"interface_spec":{"type":"object","description":"该岗位对外提供的服务","properties":{"services":{"type":"string"},"input_format":{"type":"string"},"output_format":{"type":"string"},"examples":{"type":"array","items":{"type":"string"}}}}},"required":["name","rolePrompt"]}`)}, toolCreateRole},
	{llm.Tool{Name: "spawn_agent", Description: "在你创建的岗位上创建子智能体，必须附完整任务委托书。父级由系统填为你。root 对同一 taskId 只会得到同一个子智能体。",
		Parameters: json.RawMessage(`{"type":"object","properties":{"roleId":{"type":"string"},"taskBrief":{"type":"object","properties":{"objective":{"type":"string"},"constraints":{"type":"array","items":{"type":"string"},"description":"技术约束，原样传递"},"inputs":{"type":"string"},"outputs":{"type":"string"},"completion_criteria":{"type":"string"},"collaborators":{"type":"array","items":{"type":"object","properties":{"agentId":{"type":"string"},"role":{"type":"string"},"description":{"type":"string"}},"required":["agentId"]}},"references":{"type":"array","items":{"type":"string"}},"priority":{"type":"string"}},"required":["objective","constraints","inputs","outputs","completion_criteria"]}},"required":["roleId","taskBrief"]}`)}, toolSpawn},
	{llm.Tool{Name: "send_message", Description: "异步发消息给一个智能体（to 为其 ID；user 为用户）。发送者由系统填写。payload 按 message_type 填：general/status_report 用 text；其余类型见系统提示。",
		Parameters: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"},"message_type":{"type":"string","enum":["general","task_assignment","status_report","introduction_request","introduction_response","collaboration_request","collaboration_response"]},"payload":{"type":"object"}},"required":["to","payload"]}`)}, toolSend},
	{llm.Tool{Name: "request_collaboration", Description: "请某智能体完成子任务：立即返回 request_id（pending），结果稍后以 collaboration_response 消息到达；timeout_seconds 到期未答则系统回 error。",
		Parameters: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"},"subtask_description":{"type":"string"},"context":{"type":"string","description":"所需上下文，如工件引用"},"timeout_seconds":{"type":"number"}},"required":["to","subtask_description"]}`)}, toolRequestCollaboration},
	{llm.Tool{Name: "put_artifact", Description: "保存工件（代码、文档等），返回不可变引用 artifact:<id>；在消息里传引用而不是全文。",
		Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"media_type":{"type":"string"},"content":{"type":"string"}},"required":["name","content"]}`)}, toolPutArtifact},
	{llm.Tool{Name: "get_artifact", Description: "按引用 artifact:<id> 读取工件内容。",
		Parameters: json.RawMessage(`{"type":"object","properties":{"ref":{"type":"string"}},"required":["ref"]}`)}, toolGetArtifact},
	{llm.Tool{Name: "console_print", Description: "在控制台向用户显示一行文字；不是消息，智能体收不到。",
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)}, toolConsolePrint},
	{llm.Tool{Name: "terminate_agent", Description: "终止你的一个下级（及其下级）：它先有一轮交接（写工件、向父级汇报），之后不再收消息。任务完成且已交接时用。",
		Parameters: json.RawMessage(`{"type":"object","properties":{"agentId":{"type":"string"}},"required":["agentId"]}`)}, toolTerminate},
	{llm.Tool{Name: "list_contacts", Description: "列出你的联系人（ID、角色、来源、接口说明）。",
		Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}, toolListContacts},
}

func builtinNamed(name string) *builtin {
	for i := range builtins {
		if builtins[i].def.Name == name {
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

// toolsFor returns the tool definitions an agent of role roleName sees.
func (s *Society) toolsFor(roleName string) []llm.Tool {
	out := make([]llm.Tool, 0, len(builtins)+len(s.cfg.Tools))
	for _, b := range builtins {
		out = append(out, b.def)
	}
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

// runTool runs one tool call for x and returns the JSON the model reads. It
// never panics and never fails: every failure becomes a coded error result.
func (s *Society) runTool(ctx context.Context, x *Actor, call llm.ToolCall) (result string) {
	defer func() {
		if r := recover(); r != nil {
			s.log.LogAttrs(ctx, slog.LevelError, "tool panicked", slog.String("tool", call.Name), slog.String("agent", x.ID()), slog.Any("panic", r))
			result = encodeResult(nil, &Error{Code: ErrToolFailed, Message: fmt.Sprintf("the tool %s failed", call.Name)})
		}
	}()
	args := bytes.TrimSpace(call.Arguments)
	if len(args) == 0 {
		args = []byte("{}")
	}
	if !isJSONObject(args) {
		return encodeResult(nil, &Error{Code: ErrInvalidArgument, Message: "the arguments of " + call.Name + " must be a JSON object"})
	}
	var run func(context.Context, *Actor, json.RawMessage) (any, error)
	if b := builtinNamed(call.Name); b != nil {
		run = b.run
	} else if t := s.hostTool(call.Name, x.a.roleName); t != nil {
		run = t.Handler
	} else {
		return encodeResult(nil, &Error{Code: ErrUnknownTool, Message: "there is no tool " + strconvQuote(call.Name)})
	}
	out, err := run(ctx, x, args)
	return encodeResult(out, err)
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

// toolTimeout reads an optional timeout_seconds: absent means none, and a
// value given must be positive and at most MaxTimeoutSeconds, as in a
// collaboration_request's payload.
func toolTimeout(secs *float64) (time.Duration, error) {
	if secs == nil {
		return 0, nil
	}
	d, ok := secondsToDuration(*secs)
	if !ok {
		return 0, &Error{Code: ErrInvalidArgument, Message: timeoutProblem}
	}
	return d, nil
}

// decodeArgs decodes a model's arguments for tool into v (a pointer). Empty
// arguments leave v as it is. Arguments that do not decode are refused with
// an ErrInvalidArgument whose message tells the model what to fix.
func decodeArgs(tool string, args json.RawMessage, v any) error {
	if len(bytes.TrimSpace(args)) == 0 {
		return nil
	}
	if err := json.Unmarshal(args, v); err != nil {
		return &Error{Code: ErrInvalidArgument, Message: "bad arguments for " + tool + ": " + argsProblem(err)}
	}
	return nil
}

// argsProblem says, for the model that wrote the arguments, why they did
// not decode.
func argsProblem(err error) string {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Sprintf("the arguments are not valid JSON (%v, at byte %d)", syntax, syntax.Offset)
	}
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &typ) || typ.Type == nil {
		return err.Error()
	}
	given, _, _ := strings.Cut(typ.Value, " ") // "number 1.5" names the number
	switch given {
	case "bool":
		given = "true or false"
	case "object":
		given = "a JSON object"
	case "array":
		given = "an array"
	default: // "string", "number"
		given = "a " + given
	}
	want := jsonKind(typ.Type)
	if typ.Field == "" {
		return "the arguments must be " + want + ", not " + given
	}
	if given == want { // a number too large for its Go type
		n, _ := strings.CutPrefix(typ.Value, "number ")
		return strconvQuote(typ.Field) + " holds a number out of range: " + n + " is too large"
	}
	return strconvQuote(typ.Field) + " holds " + given + " where " + want + " is expected"
}

// jsonKind names the JSON value that decodes into a value of type t.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "a JSON object"
	}
	return "another kind of value"
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
	return roleResult{RoleID: r.ID, Name: r.Name, CreatedBy: r.CreatedBy, Yours: true, Reused: &reused}, nil
}

func toolSpawn(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		RoleID        string     `json:"roleId"`
		TaskBrief     *TaskBrief `json:"taskBrief"`
		ParentAgentID string     `json:"parentAgentId"`
	}
	if err := decodeArgs("spawn_agent", args, &a); err != nil {
		return nil, err
	}
	c, reused, err := x.SpawnAgent(ctx, SpawnSpec{RoleID: a.RoleID, Brief: a.TaskBrief, ParentID: a.ParentAgentID})
	if err != nil {
		return nil, err
	}
	return map[string]any{"agentId": c.ID, "roleId": c.RoleID, "taskId": c.TaskID, "reused": reused}, nil
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
	// Models often pass a bare string as the payload: take it as the text.
	if p := bytes.TrimSpace(a.Payload); len(p) > 0 && p[0] == '"' {
		var text string
		if json.Unmarshal(p, &text) == nil {
			a.Payload = Text(text)
		}
	}
	m, err := x.Send(ctx, Outgoing{To: a.To, Type: a.MessageType, Payload: a.Payload})
	if err != nil {
		return nil, err
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

func toolRequestCollaboration(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		To                 string          `json:"to"`
		SubtaskDescription string          `json:"subtask_description"`
		Context            json.RawMessage `json:"context"`
		TimeoutSeconds     *float64        `json:"timeout_seconds"`
	}
	if err := decodeArgs("request_collaboration", args, &a); err != nil {
		return nil, err
	}
	timeout, err := toolTimeout(a.TimeoutSeconds)
	if err != nil {
		return nil, err
	}
	id, err := x.RequestCollaboration(ctx, a.To, CollaborationRequestPayload{SubtaskDescription: a.SubtaskDescription, Context: a.Context}, timeout)
	if err != nil {
		return nil, err
	}
	return map[string]any{"request_id": id, "status": StatusPending}, nil
}

func toolPutArtifact(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		Name      string `json:"name"`
		MediaType string `json:"media_type"`
		Content   string `json:"content"`
	}
	if err := decodeArgs("put_artifact", args, &a); err != nil {
		return nil, err
	}
	if a.MediaType == "" {
		a.MediaType = "text/plain; charset=utf-8"
	}
	art, err := x.PutArtifact(ctx, ArtifactSpec{Name: a.Name, MediaType: a.MediaType, Data: []byte(a.Content)})
	if err != nil {
		return nil, err
	}
	return map[string]any{"ref": art.Ref(), "name": art.Name, "size": art.Size}, nil
}

func toolGetArtifact(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		Ref string `json:"ref"`
	}
	if err := decodeArgs("get_artifact", args, &a); err != nil {
		return nil, err
	}
	art, data, err := x.GetArtifact(ctx, a.Ref)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"ref": art.Ref(), "name": art.Name, "media_type": art.MediaType, "size": art.Size, "createdBy": art.CreatedBy}
	if utf8.Valid(data) {
		out["content"] = string(data)
	} else {
		out["content_base64"] = data // encoding/json writes []byte as base64
	}
	return out, nil
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
	s.user.print("[" + x.ID() + "] " + a.Text + "\n")
	return map[string]any{"ok": true}, nil
}

func toolTerminate(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		AgentID string `json:"agentId"`
	}
	if err := decodeArgs("terminate_agent", args, &a); err != nil {
		return nil, err
	}
	if err := x.Terminate(ctx, a.AgentID); err != nil {
		return nil, err
	}
	return map[string]any{"agentId": a.AgentID, "status": StatusTerminating}, nil
}

func toolListContacts(_ context.Context, x *Actor, _ json.RawMessage) (any, error) {
	type entry struct {
		ID            string         `json:"id"`
		Role          string         `json:"role"`
		Source        ContactSource  `json:"source"`
		IntroducedBy  string         `json:"introducedBy,omitempty"`
		Note          string         `json:"note,omitempty"`
		InterfaceSpec *InterfaceSpec `json:"interface_spec,omitempty"`
	}
	contacts := x.Contacts()
	out := make([]entry, len(contacts))
	for i, c := range contacts {
		out[i] = entry{c.ID, c.Role, c.Source, c.IntroducedBy, c.Note, c.InterfaceSpec}
	}
	return map[string]any{"contacts": out}, nil
}
