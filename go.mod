module agentsociety

go 1.26.0

require github.com/google/go-cmp v0.7.0

require (
	github.com/chromedp/chromedp v0.23.0
	github.com/openai/openai-go/v3 v3.96.0
	github.com/tiktoken-go/tokenizer v0.10.0
	golang.org/x/sync v0.24.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/coder/websocket v1.8.15 // indirect
	github.com/dlclark/regexp2/v2 v2.5.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
)
