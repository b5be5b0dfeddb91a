// Command inspect runs the seed 001 scenario on the offline demo model
// with the live inspector (package inspect) on a loopback port: it prints
// the inspector's address, submits the quick start's requirement, and
// serves until interrupted. Open the address in a browser to watch the
// organisation grow, the messages flow and the calculator the developer
// stores, rendered in a sandboxed frame; pick an agent to send it a
// message as user.
//
//	go run ./examples/inspect
//	go run ./examples/inspect -addr 127.0.0.1:8080 -send=false
//
// The inspector has no authentication of its own, so this program serves
// it only on a loopback address.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	as "agentsociety"
	"agentsociety/examples/internal/show"
	"agentsociety/inspect"
	"agentsociety/internal/demo"
	"agentsociety/llm"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "the loopback address to serve the inspector on (port 0 picks a free one)")
	send := flag.Bool("send", true, "let the page send messages as user")
	flag.Parse()
	ln, err := listen(*addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inspect:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, ln, os.Stdout, demo.Model(), *send); err != nil {
		fmt.Fprintln(os.Stderr, "inspect:", err)
		os.Exit(1)
	}
}

// listen listens on addr, which must be a loopback address.
func listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%s is not a loopback address: the inspector has no authentication of its own", addr)
	}
	return net.Listen("tcp", addr)
}

// run starts a society on model with the inspector served on ln, prints
// the address to out, submits demo.Requirement, and serves until ctx ends;
// then it closes the society, which ends the page's event streams, and the
// server.
func run(ctx context.Context, ln net.Listener, out io.Writer, model llm.Model, allowSend bool) error {
	w := show.NewSyncWriter(out)
	s, err := as.New(ctx, as.Config{Model: model, Logger: show.Logger(w)})
	if err != nil {
		ln.Close()
		return err
	}
	s.OnUserMessage(func(m as.Message) {
		w.Printf("user receives from %s: %s\n", m.From, show.Clip(strings.TrimSpace(m.Text()), 200))
	})
	srv := &http.Server{Handler: inspect.New(s, inspect.Options{AllowSend: allowSend}), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	w.Printf("inspector on http://%s/\n", ln.Addr())

	task, err := s.SubmitRequirement(ctx, demo.Requirement)
	if err == nil {
		w.Printf("submitted the requirement as task %s; interrupt to stop\n", task)
		<-ctx.Done()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = errors.Join(err, s.Close(cctx))
	if serr := srv.Shutdown(cctx); serr != nil {
		err = errors.Join(err, serr)
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
