// Command cli is the asynchronous command line of seed 002 §5.2.10: the user
// keeps typing while the society works, and what the organisation says to
// the user is printed as it arrives.
//
//	go run ./examples/cli
//
// Each line of input is one of:
//
//	any text          a new requirement, submitted to root on a new task
//	@agentId text     text sent from user to that agent, on its task
//	/org              the organisation as it stands, as a tree
//	/org mermaid      the same as a Mermaid flowchart, with contacts
//	/help             this list
//	/quit             close the society and exit (so does end of input)
//
// Messages to user appear in the Requirement 10 format, with the sender's
// role and id on the first line, so the user knows whom to answer with
// @agentId. Offline (the default) the agents run on the scripted demo model
// of internal/demo, which builds the seed 001 calculator whatever
// the requirement says; with OPENAI_API_KEY or OPENAI_BASE_URL set, or with
// -real, they run on an OpenAI-compatible model (see package llm/openai).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
	"unicode"

	as "agentsociety"
	"agentsociety/examples/internal/show"
	"agentsociety/internal/demo"
	"agentsociety/llm"
	"agentsociety/mermaid"
)

// closeTimeout bounds how long /quit waits for agents to finish the turns
// they are in before it cancels them.
const closeTimeout = 10 * time.Second

// maxLine is the longest line of input the command line reads; a longer
// line is refused whole.
const maxLine = 64 << 10

const help = `commands:
  any text        submit a new requirement
  @agentId text   send text to an agent
  /org            show the organisation
  /org mermaid    show it as a Mermaid flowchart
  /help           show this list
  /quit           close the society and exit
`

func main() {
	pick := show.ModelFlag(flag.CommandLine, "the offline demo model", demo.Model)
	flag.Parse()
	model, onReal, err := pick()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cli:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	which := "the offline demo model"
	if onReal {
		which = "a real model"
	}
	fmt.Printf("agentsociety on %s.\n", which)
	if err := run(ctx, os.Stdin, os.Stdout, model); err != nil {
		fmt.Fprintln(os.Stderr, "cli:", err)
		os.Exit(1)
	}
}

// run reads commands from in until /quit, the end of in or the end of ctx,
// while the society on model works and its messages to user are printed to
// out. Reading never waits for the society: submitting and sending only
// queue a message. It closes the society before it returns. When ctx ends
// while in is blocked, the goroutine reading in stays blocked until in
// returns, which for os.Stdin is the end of the process.
func run(ctx context.Context, in io.Reader, out io.Writer, model llm.Model) error {
	w := show.NewSyncWriter(out)
	s, err := as.New(ctx, as.Config{
		Model:       model,
		UserConsole: w, // messages to user and console_print, as they arrive
		Logger:      show.Logger(w),
	})
	if err != nil {
		return err
	}
	w.Printf("%s\n", help)

	lines := make(chan string)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(lines)
		r := bufio.NewReader(in)
		for {
			line, err := readLine(r)
			if errors.Is(err, errLineTooLong) {
				w.Printf("line too long: a line holds at most %d bytes; it was ignored\n", maxLine)
				continue
			}
			if line != "" || err == nil {
				select {
				case lines <- line:
				case <-done:
					return
				}
			}
			if err == io.EOF {
				return
			}
			if err != nil {
				w.Printf("reading input: %v\n", err)
				return
			}
		}
	}()

	for quit := false; !quit; {
		select {
		case <-ctx.Done():
			quit = true
		case line, ok := <-lines:
			quit = !ok || command(ctx, w, s, strings.TrimSpace(line))
		}
	}

	w.Printf("closing the society…\n")
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		w.Printf("agents still working after %v were stopped\n", closeTimeout)
	}
	w.Printf("bye\n")
	return nil
}

// errLineTooLong is what readLine returns for a line over maxLine bytes.
var errLineTooLong = errors.New("line too long")

// readLine returns the next line of r without its line ending. A line over
// maxLine bytes is read to its end and dropped, with errLineTooLong, so
// that input without line breaks cannot fill memory. At the end of r it
// returns the last line, if it had no line ending, with io.EOF.
func readLine(r *bufio.Reader) (string, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) > maxLine+len("\r\n") {
			tooLong, line = true, nil
		}
		if !tooLong {
			line = append(line, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if tooLong && (err == nil || err == io.EOF) {
			return "", errLineTooLong
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		return string(line), err
	}
}

// command carries out one line of input and reports whether it was /quit.
func command(ctx context.Context, w *show.SyncWriter, s *as.Society, line string) (quit bool) {
	if strings.HasPrefix(line, "/") {
		line = strings.Join(strings.Fields(line), " ") // "/org   mermaid" is /org mermaid
	}
	switch {
	case line == "":
	case line == "/quit":
		return true
	case line == "/org":
		var b strings.Builder
		show.WriteOrg(&b, s)
		w.Printf("%s\n", b.String())
	case line == "/org mermaid":
		var b strings.Builder
		mermaid.WriteFlowchart(&b, mermaid.OrgOf(s, true))
		w.Printf("%s\n", b.String())
	case line == "/help":
		w.Printf("%s\n", help)
	case strings.HasPrefix(line, "/"):
		switch cmd, _, _ := strings.Cut(line, " "); cmd {
		case "/org":
			w.Printf("usage: /org or /org mermaid\n")
		case "/help", "/quit":
			w.Printf("usage: %s, with nothing after it\n", cmd)
		default:
			w.Printf("unknown command %s (try /help)\n", cmd)
		}
	case strings.HasPrefix(line, "@"):
		to, text := line[1:], ""
		if i := strings.IndexFunc(to, unicode.IsSpace); i >= 0 {
			to, text = to[:i], to[i:]
		}
		if to == "" || strings.TrimSpace(text) == "" {
			w.Printf("usage: @agentId text\n")
			break
		}
		if _, err := s.SendTextToAgent(ctx, to, strings.TrimSpace(text), ""); err != nil {
			w.Printf("error: %v\n", err)
			break
		}
		w.Printf("sent to %s\n", to)
	default:
		task, err := s.SubmitRequirement(ctx, line)
		if err != nil {
			w.Printf("error: %v\n", err)
			break
		}
		w.Printf("submitted as %s\n", task)
	}
	return false
}
