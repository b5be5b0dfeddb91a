// Package openai adapts an OpenAI-compatible chat-completions endpoint to
// [llm.Model], so that a society can run on OpenAI or on any server that
// speaks the same wire format (vLLM, llama.cpp, Ollama, LiteLLM, ...).
//
// The adapter is a thin translation layer over the official SDK
// (github.com/openai/openai-go/v3): it maps an [llm.Request] to one
// non-streaming chat completion with function tools, maps the first choice
// back to an [llm.Response], and maps every transport failure onto the error
// kinds of package llm, so that callers decide whether to retry with
// errors.Is and never by matching strings.
//
// By default the adapter makes one HTTP request per Generate: the SDK's own
// retries are off (see Config.MaxRetries), so that retries happen in one
// layer, the caller's (the society retries transient failures itself, with
// Config.ModelRetries), and a persistent failure costs one request per
// attempt of that layer rather than three.
//
// The response is normalised to the [llm.Model] contract: a tool call the
// provider sent without an id (or with one already used in the
// conversation) is given a fresh one, finish_reason "length" sets
// [llm.Response].Truncated, and finish_reason "content_filter" sets
// Truncated and Filtered.
package openai

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"agentsociety/llm"
)

// The environment variables New consults for Config fields left empty. The
// base URL and key use the SDK's own names so that an environment already set
// up for OpenAI tooling works unchanged; the model name is ours because the
// SDK has no such variable.
const (
	EnvModel   = "AGENTSOCIETY_MODEL" // model name, for Config.Model
	EnvBaseURL = "OPENAI_BASE_URL"    // API root, for Config.BaseURL
	EnvAPIKey  = "OPENAI_API_KEY"     // bearer token, for Config.APIKey
)

// Defaults for Config fields left at their zero value. DefaultModel is small
// and cheap because a society makes many calls. DefaultMaxRetries is zero,
// unlike the SDK's own default of 2: the caller's retry loop is the one
// layer of retries (see Config.MaxRetries).
const (
	DefaultModel      = "gpt-4o-mini"    // for Config.Model
	DefaultMaxRetries = 0                // for Config.MaxRetries: the SDK does not retry
	DefaultTimeout    = 60 * time.Second // for Config.Timeout, per attempt
)

// Config configures a Model. Every zero value means "use the default", so
// Config{} is a working configuration when the environment provides a key.
type Config struct {
	// Model is the model name sent with every request. Empty means the value
	// of $AGENTSOCIETY_MODEL, else DefaultModel.
	Model string
	// BaseURL is the API root, e.g. "http://localhost:8000/v1" for a local
	// OpenAI-compatible server. Empty means $OPENAI_BASE_URL, else the SDK's
	// default (https://api.openai.com/v1/).
	BaseURL string
	// APIKey is sent as a bearer token. Empty means $OPENAI_API_KEY. It may
	// stay empty only when a base URL is configured, since local servers
	// often need no key while the OpenAI API always does.
	APIKey string
	// MaxRetries is how many times the SDK itself retries a request that
	// failed transiently (connection error, HTTP 408, 409, 429 or 5xx; not a
	// 429 that says the account is out of quota, see Generate), with
	// exponential backoff or the delay the server asks for, within one
	// Generate call. 0 (DefaultMaxRetries) and negative values mean none:
	// each Generate makes one HTTP request and returns a transient failure
	// as an error wrapping llm.ErrRateLimited, llm.ErrServer or
	// llm.ErrTimeout, for the caller to retry. That is what a society wants,
	// since it retries with its own budget (agentsociety.Config.ModelRetries)
	// and SDK retries would multiply it. A host that calls Generate directly,
	// without a retry loop of its own, sets a positive value.
	MaxRetries int
	// Timeout bounds each attempt, not the whole call (the caller's context
	// does that). 0 means DefaultTimeout; a negative value means no
	// per-attempt limit. The SDK does not retry an attempt that timed out:
	// the call fails with an error wrapping llm.ErrTimeout, which is
	// transient, so the caller's own retry policy decides.
	Timeout time.Duration
	// HTTPClient carries requests, e.g. one with a proxy or custom TLS. Nil
	// means the SDK's default client.
	HTTPClient *http.Client
	// Temperature is the sampling temperature. Nil sends none, leaving the
	// provider's default (and avoiding errors from models that reject it).
	Temperature *float64
}

// Model is an llm.Model backed by a chat-completions endpoint. It holds no
// mutable state after New, so it is safe for concurrent use.
type Model struct {
	client      sdk.Client
	model       string
	temperature param.Opt[float64]
	timeout     time.Duration // per attempt; 0 means none
}

var _ llm.Model = (*Model)(nil)

// New returns a Model for cfg, filling empty fields from the environment and
// the defaults documented on Config. It fails, without contacting the
// server, when no API key and no base URL are configured (the OpenAI API
// would refuse every call) or when the base URL is not an http(s) URL.
func New(cfg Config) (*Model, error) {
	model := firstNonEmpty(cfg.Model, os.Getenv(EnvModel), DefaultModel)
	baseURL := firstNonEmpty(cfg.BaseURL, os.Getenv(EnvBaseURL))
	apiKey := firstNonEmpty(cfg.APIKey, os.Getenv(EnvAPIKey))
	if apiKey == "" && baseURL == "" {
		return nil, fmt.Errorf("openai: no API key: set %s (or Config.APIKey); "+
			"for an OpenAI-compatible server that needs no key, set %s (or Config.BaseURL) instead",
			EnvAPIKey, EnvBaseURL)
	}

	retries := max(cfg.MaxRetries, 0) // zero and negative: none, DefaultMaxRetries
	timeout := cfg.Timeout
	switch {
	case timeout == 0:
		timeout = DefaultTimeout
	case timeout < 0:
		timeout = 0
	}

	// NewClient applies these after the defaults it reads from the
	// environment, so they win. The retry count is always set, even to 0:
	// the SDK's own default is 2. The base URL is always set, even to the
	// default: the SDK alone would apply an empty-but-set OPENAI_BASE_URL
	// verbatim and then send requests to a relative URL.
	opts := []option.RequestOption{
		option.WithMaxRetries(retries),
		option.WithRequestTimeout(timeout),
		option.WithMiddleware(quotaNotRetried),
	}
	if baseURL != "" {
		u, err := url.Parse(baseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("openai: base URL %q is not an http(s) URL", baseURL)
		}
		opts = append(opts, option.WithBaseURL(baseURL))
	} else {
		opts = append(opts, option.WithBaseURL(defaultBaseURL))
	}
	if apiKey != "" {
		opts = append(opts, option.WithAPIKey(apiKey))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}

	m := &Model{
		client:  sdk.NewClient(opts...),
		model:   model,
		timeout: timeout,
	}
	if cfg.Temperature != nil {
		// Copied so that later changes to the caller's variable do not race
		// with concurrent Generate calls.
		m.temperature = param.NewOpt(*cfg.Temperature)
	}
	return m, nil
}

// defaultBaseURL is the SDK's production endpoint. It is repeated here only
// to override an empty OPENAI_BASE_URL, which the SDK would otherwise honour.
const defaultBaseURL = "https://api.openai.com/v1/"

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Generate sends req as one chat completion and returns the first choice.
// Errors wrap the kinds of package llm (see the package documentation of
// llm); a request the adapter cannot translate (an unknown role, tool
// parameters that are not a JSON object) fails with llm.ErrBadRequest before
// anything is sent. A tool call in the answer that has no id, or one that
// an earlier call of the request or of the answer already has, is given a
// new id ("call_" and random letters), so that every id is unique within
// the conversation as llm.Model requires; the caller sends its result back
// under that id. An answer cut off at the output limit (finish_reason
// "length") has Truncated set; one the content filter cut off or withheld
// (finish_reason "content_filter") has Truncated and Filtered set. An HTTP 429 whose error is
// "insufficient_quota" (the account is out of credit) is not a rate limit:
// it fails with llm.ErrAuth, which is not transient, and is not retried.
func (m *Model) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if req == nil {
		return nil, fmt.Errorf("openai: nil request: %w", llm.ErrBadRequest)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("openai: chat completion: %w", err)
	}
	params, err := m.params(req)
	if err != nil {
		return nil, err
	}
	// The raw response is captured because the SDK turns an error body it
	// cannot parse (plain text from a proxy, {"error": "..."} from some
	// compatible servers) into a bare JSON error without the status code.
	var httpResp *http.Response
	completion, err := m.client.Chat.Completions.New(ctx, params, option.WithResponseInto(&httpResp))
	if err != nil {
		return nil, m.classify(ctx, err, httpResp)
	}
	return response(completion, req)
}

// params translates req. Everything is copied into SDK types, so nothing of
// req is kept after Generate returns.
func (m *Model) params(req *llm.Request) (sdk.ChatCompletionNewParams, error) {
	p := sdk.ChatCompletionNewParams{
		Model:       shared.ChatModel(m.model),
		Temperature: m.temperature,
		Messages:    make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.Messages)+1),
	}
	if req.System != "" {
		p.Messages = append(p.Messages, sdk.SystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case llm.RoleUser:
			p.Messages = append(p.Messages, sdk.UserMessage(msg.Content))
		case llm.RoleTool:
			p.Messages = append(p.Messages, sdk.ToolMessage(msg.Content, msg.ToolCallID))
		case llm.RoleAssistant:
			p.Messages = append(p.Messages, assistantMessage(msg))
		default:
			return p, fmt.Errorf("openai: message %d has unknown role %q: %w", i, msg.Role, llm.ErrBadRequest)
		}
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = param.NewOpt(t.Description)
		}
		schema, err := parameters(t.Parameters)
		if err != nil {
			return p, fmt.Errorf("openai: tool %q: %w: %w", t.Name, err, llm.ErrBadRequest)
		}
		fn.Parameters = schema
		p.Tools = append(p.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	return p, nil
}

// assistantMessage replays an earlier assistant turn. The content is omitted
// (sent as absent rather than "") when the turn only made tool calls, which
// is how OpenAI itself reports such turns and what strict compatible servers
// expect.
func assistantMessage(msg llm.Message) sdk.ChatCompletionMessageParamUnion {
	var a sdk.ChatCompletionAssistantMessageParam
	if msg.Content != "" || len(msg.ToolCalls) == 0 {
		a.Content.OfString = param.NewOpt(msg.Content)
	}
	for _, tc := range msg.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
				ID: tc.ID,
				Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{
					Name:      tc.Name,
					Arguments: string(tc.Arguments),
				},
			},
		})
	}
	return sdk.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

// parameters converts a tool's JSON Schema to the SDK's map form. Each
// top-level value stays a json.RawMessage, which the SDK writes out
// verbatim, so the schema reaches the server exactly as given. Decoding it
// into plain Go values would not: float64 rounds large integer bounds, and
// the SDK's encoder writes a json.Number as a JSON string. An empty schema
// is omitted, which the API reads as "no parameters".
func parameters(raw json.RawMessage) (shared.FunctionParameters, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil {
		return nil, fmt.Errorf("parameters are not a JSON Schema object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("parameters have trailing data after the JSON Schema object")
	}
	schema := make(shared.FunctionParameters, len(fields))
	for k, v := range fields {
		schema[k] = v
	}
	return schema, nil
}

// response maps the first choice back. Arguments are taken as the server
// sent them, without validation: a model may write invalid JSON, and the
// caller, not the transport, decides what to tell it. Tool call ids are
// made unique within the conversation, req's earlier calls included.
func response(c *sdk.ChatCompletion, req *llm.Request) (*llm.Response, error) {
	if c == nil { // the SDK's answer to a body of JSON null
		return nil, fmt.Errorf("openai: the response is JSON null, not a chat completion: %w", llm.ErrServer)
	}
	if len(c.Choices) == 0 {
		detail := ""
		// Some compatible servers report failures as HTTP 200 with an
		// "error" object instead of choices.
		if f, ok := c.JSON.ExtraFields["error"]; ok && f.Raw() != "" {
			detail = ": " + f.Raw()
		}
		return nil, fmt.Errorf("openai: response %q has no choices%s: %w", c.ID, detail, llm.ErrServer)
	}
	if f := c.Choices[0].JSON.Message; !f.Valid() {
		// The SDK reads a missing, null or malformed message as an empty
		// one, which would pass for an answer that says nothing.
		what := "none"
		if raw := f.Raw(); raw != "" {
			what = strings.ToValidUTF8(raw[:min(len(raw), maxBodyDetail)], "")
		}
		return nil, fmt.Errorf("openai: response %q has no message in its first choice (%s): %w", c.ID, what, llm.ErrServer)
	}
	msg := c.Choices[0].Message
	out := llm.Message{Role: llm.RoleAssistant, Content: msg.Content}
	if out.Content == "" && msg.Refusal != "" {
		// A refusal is the model's answer; dropping it would leave the
		// agent with an empty turn and no explanation.
		out.Content = msg.Refusal
	}
	for _, tc := range msg.ToolCalls {
		call := llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)}
		if raw := tc.Function.JSON.Arguments.Raw(); raw != "" && raw != "null" && raw[0] != '"' {
			// Some compatible servers send the arguments as a JSON object
			// rather than a string holding one; the SDK then leaves the
			// string empty, so keep the object itself.
			call.Arguments = json.RawMessage(raw)
		}
		if tc.Type == "custom" {
			call.Name, call.Arguments = tc.Custom.Name, json.RawMessage(tc.Custom.Input)
		}
		out.ToolCalls = append(out.ToolCalls, call)
	}
	uniqueIDs(out.ToolCalls, req)
	finish := c.Choices[0].FinishReason
	filtered := finish == "content_filter"
	return &llm.Response{
		Message: out,
		Usage: llm.Usage{
			InputTokens:  int(c.Usage.PromptTokens),
			OutputTokens: int(c.Usage.CompletionTokens),
		},
		Truncated: finish == "length" || filtered,
		Filtered:  filtered,
	}, nil
}

// uniqueIDs gives a fresh id to every call in calls whose id is empty or
// already taken, by an earlier call in calls or in req's conversation. Some
// compatible servers send no ids, or number calls afresh in every response
// ("call_0"), and results are matched to calls by id.
func uniqueIDs(calls []llm.ToolCall, req *llm.Request) {
	if len(calls) == 0 {
		return
	}
	seen := make(map[string]bool)
	for _, m := range req.Messages {
		for _, tc := range m.ToolCalls {
			seen[tc.ID] = true
		}
	}
	for i := range calls {
		for calls[i].ID == "" || seen[calls[i].ID] {
			calls[i].ID = "call_" + rand.Text()
		}
		seen[calls[i].ID] = true
	}
}

// classify maps an SDK error onto the kinds of package llm; httpResp is the
// last response received, if any. The caller's context is consulted first:
// once it is done, its error explains the failure better than whatever the
// transport saw, and the llm contract requires wrapping it.
func (m *Model) classify(ctx context.Context, err error, httpResp *http.Response) error {
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.DeadlineExceeded) {
			return fmt.Errorf("openai: chat completion: %w: %w", llm.ErrTimeout, cerr)
		}
		return fmt.Errorf("openai: chat completion: %w", cerr)
	}

	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		if apiErr.StatusCode == http.StatusTooManyRequests && (apiErr.Code == insufficientQuota || apiErr.Type == insufficientQuota) {
			return fmt.Errorf("openai: chat completion: the account is out of quota (out of credit or past its spending limit), "+
				"so no retry succeeds until its plan or billing is changed: %w: %w%s", llm.ErrAuth, apiErr, providerDetail(apiErr, apiErr.Response))
		}
		return fmt.Errorf("openai: chat completion: %w: %w%s", statusKind(apiErr.StatusCode), apiErr, providerDetail(apiErr, apiErr.Response))
	}
	if httpResp != nil && httpResp.StatusCode >= 400 {
		// An error status whose body the SDK failed to parse: the status
		// still says what kind of failure it was.
		return fmt.Errorf("openai: chat completion: %w: HTTP %s%s", statusKind(httpResp.StatusCode), httpResp.Status, providerDetail(nil, httpResp))
	}

	// With the caller's context still live, a deadline can only be the
	// per-attempt one. The SDK's error is kept as text only: wrapping it
	// would make errors.Is(err, context.DeadlineExceeded) claim that the
	// caller's deadline passed.
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		limit := ""
		if m.timeout > 0 {
			limit = fmt.Sprintf(" (limit %v)", m.timeout)
		}
		return fmt.Errorf("openai: chat completion: attempt timed out%s: %w: %v", limit, llm.ErrTimeout, err)
	}

	// What remains are connection failures and unreadable responses: the
	// provider side broke, and trying again may well work.
	return fmt.Errorf("openai: chat completion: %w: %w", llm.ErrServer, err)
}

// insufficientQuota is the type and code of OpenAI's error for an account
// out of credit or past its spending limit. It comes with HTTP 429, like a
// rate limit, but waiting does not end it: it is classified as llm.ErrAuth,
// a failure of the account that the host must fix, and never retried.
const insufficientQuota = "insufficient_quota"

// maxQuotaBody bounds how much of a 429's body quotaNotRetried reads to
// find its error's type and code; OpenAI's is a few hundred bytes.
const maxQuotaBody = 64 << 10

// quotaNotRetried is SDK middleware that marks a 429 whose error is
// insufficient_quota as not to be retried ("x-should-retry: false", which
// the SDK obeys over the status), so that with Config.MaxRetries > 0 the
// SDK does not retry what cannot succeed. The body it reads is put back for
// the SDK to parse.
func quotaNotRetried(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err != nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Body == nil {
		return resp, err
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxQuotaBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	if rerr != nil {
		return resp, nil // the SDK meets the same failure reading the rest
	}
	var body struct {
		Error struct {
			Type, Code any
		} `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil && (body.Error.Type == insufficientQuota || body.Error.Code == insufficientQuota) {
		if resp.Header == nil {
			resp.Header = http.Header{}
		}
		resp.Header.Set("x-should-retry", "false")
	}
	return resp, nil
}

// statusKind maps an HTTP status onto an llm error kind.
func statusKind(code int) error {
	switch {
	case code == http.StatusTooManyRequests:
		return llm.ErrRateLimited
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return llm.ErrAuth
	case code == http.StatusRequestTimeout:
		return llm.ErrTimeout
	case code == http.StatusConflict || code >= 500:
		// 409 is a transient conflict on the provider's side; the SDK
		// retries it for the same reason.
		return llm.ErrServer
	default:
		// 400, 404, 422 and any other 4xx: the same request will fail the
		// same way again.
		return llm.ErrBadRequest
	}
}

// maxBodyDetail bounds how much of an unparsed error body goes into an error
// message: enough for a proxy's or server's explanation, not a whole page.
const maxBodyDetail = 512

// providerDetail returns the provider's explanation, which *openai.Error's
// own Error method leaves out on purpose (it may echo request content). The
// society needs it to tell a wrong model name from a context overflow. When
// the body was not OpenAI's error format, its text is used instead. Either
// argument may be nil.
func providerDetail(e *sdk.Error, resp *http.Response) string {
	var parts []string
	if e != nil && e.Message != "" {
		parts = append(parts, e.Message)
	} else if body := bodyText(resp); body != "" {
		parts = append(parts, body)
	}
	var tags []string
	if e != nil && e.Type != "" {
		tags = append(tags, "type "+e.Type)
	}
	if e != nil && e.Code != "" {
		tags = append(tags, "code "+e.Code)
	}
	if e != nil && e.Param != "" {
		tags = append(tags, "param "+e.Param)
	}
	if len(tags) > 0 {
		parts = append(parts, "("+strings.Join(tags, ", ")+")")
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, " ")
}

// bodyText returns the start of an error response's body. The SDK has
// already read the body and replaced it with an in-memory copy, so this
// neither blocks nor touches the network. What it reads is put back, so the
// *openai.Error wrapped in the returned error can still dump the response.
func bodyText(resp *http.Response) string {
	if resp == nil || resp.Body == nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBodyDetail+1))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	text := strings.Join(strings.Fields(string(b)), " ")
	if len(b) > maxBodyDetail {
		text = strings.ToValidUTF8(text[:min(len(text), maxBodyDetail)], "") + "..."
	}
	return text
}
