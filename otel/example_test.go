package otel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	as "agentsociety"
	"agentsociety/internal/demo"
	"agentsociety/otel"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Example follows the quick start and prints who caused what: each turn
// under the turn that sent its message, with the spawns; model and tool
// calls are left out to keep it short.
func Example() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx := context.Background()
	s, err := as.New(ctx, as.Config{Model: demo.Model(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	followed := make(chan error)
	go func() { followed <- otel.Follow(ctx, s, otel.Options{TracerProvider: tp}) }()

	if _, _, err := demo.Run(ctx, s); err != nil {
		panic(err)
	}
	for !settled(s) { // the user's turn ends once the host has the message
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(ctx); err != nil {
		panic(err)
	}
	if err := <-followed; err != nil { // nil: it stopped because s was closed
		panic(err)
	}

	children := map[trace.SpanID][]string{}
	ids := map[string]trace.SpanID{}
	for _, sp := range exp.GetSpans() {
		if sp.Name == otel.OperationChat || strings.HasPrefix(sp.Name, otel.OperationExecuteTool) {
			continue
		}
		key := sp.Name + "\x00" + sp.SpanContext.SpanID().String()
		ids[key] = sp.SpanContext.SpanID()
		children[sp.Parent.SpanID()] = append(children[sp.Parent.SpanID()], key)
	}
	var print func(parent trace.SpanID, depth int)
	print = func(parent trace.SpanID, depth int) {
		list := children[parent]
		sort.Strings(list)
		for _, key := range list {
			fmt.Println(strings.Repeat("  ", depth) + strings.Split(key, "\x00")[0])
			print(ids[key], depth+1)
		}
	}
	print(trace.SpanID{}, 0)
	// Output:
	// invoke_workflow
	//   invoke_agent root
	//     create_agent lead
	//     invoke_agent lead
	//       create_agent developer
	//       create_agent tester
	//       invoke_agent developer
	//         invoke_agent tester
	//           invoke_agent developer
	//             invoke_agent lead
	//               invoke_agent user
	//       invoke_agent tester
}

// ExampleInject submits a requirement under the host's own span: the
// society's trace of the task is that span's child.
func ExampleInject() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx := context.Background()
	s, err := as.New(ctx, as.Config{Model: demo.Model(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	followed := make(chan error)
	go func() { followed <- otel.Follow(ctx, s, otel.Options{TracerProvider: tp}) }()

	hostCtx, host := tp.Tracer("host").Start(ctx, "handle request")
	if _, _, err := demo.Run(otel.Inject(hostCtx), s); err != nil {
		panic(err)
	}
	host.End()
	for !settled(s) {
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(ctx); err != nil {
		panic(err)
	}
	if err := <-followed; err != nil {
		panic(err)
	}

	for _, sp := range exp.GetSpans() {
		if sp.Name == otel.OperationInvokeWorkflow {
			fmt.Println("workflow under the host's span:", sp.Parent.SpanID() == host.SpanContext().SpanID())
			fmt.Println("in the host's trace:", sp.SpanContext.TraceID() == host.SpanContext().TraceID())
		}
	}
	// Output:
	// workflow under the host's span: true
	// in the host's trace: true
}
