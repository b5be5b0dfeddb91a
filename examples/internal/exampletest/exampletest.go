// Package exampletest holds what the tests of the example programs share.
package exampletest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"agentsociety/llm"
)

// ModelUnreachable runs run, an example program's run function, on a model
// that refuses every call, as a real one does with a wrong key or no
// network, and checks that the program stops with the model's failure,
// which root reports to user, long before its deadline, rather than
// waiting the deadline out (minutes on a real model).
func ModelUnreachable(t testing.TB, run func(context.Context, io.Writer, llm.Model) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard only
	defer cancel()
	refused := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		return nil, fmt.Errorf("%w: incorrect API key provided", llm.ErrAuth)
	})
	var out bytes.Buffer
	err := run(ctx, &out, refused)
	if ctx.Err() != nil {
		t.Fatalf("run waited for its deadline: %v\n%s", err, out.String())
	}
	if err == nil || !strings.Contains(err.Error(), "incorrect API key") {
		t.Fatalf("run returned %v, want the model's failure\n%s", err, out.String())
	}
}
