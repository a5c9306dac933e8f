package daytona

import (
	"bytes"
	"context"
	"encoding/base64"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// A command line for Daytona travels as one string, and two different
// parsers split it: process/execute splits on spaces with ' and " grouping
// words and no escapes (and turns bytes that are not UTF-8 into U+FFFD),
// while a session hands it to a shell. commandLine writes a line that both
// read the same way: sh -c, a fixed decoder, the script base64-encoded, and
// every argument as one single-quoted word of printable ASCII with no quote
// in it (its other bytes escaped as \0ooo for printf %b), prefixed with x
// so that an empty argument is still a word. No argument is ever part of
// the script's text.

// decoder is the program of sh -c: it runs the script that $0 holds in
// base64.
const decoder = `eval "$(printf %s "$0" | base64 -d)"`

// decodeArgs is the head of every script: it decodes the arguments in
// place// (only those that hold an escape cost a subshell).
const decodeArgs = `for a; do
	shift
	case $a in
	*\\*) a=$(printf '%bx' "${a#x}"); a=${a%x} ;;
	*) a=${a#x} ;;
	esac
	set -- "$@" "$a"
done
`

// commandLine returns the line that runs script (which starts with
// decodeArgs) with args.
func commandLine(script string, args ...string) string {
	var b strings.Builder
	b.WriteString(`sh -c '` + decoder + `' '` + base64.StdEncoding.EncodeToString([]byte(script)) + `'`)
	for _, a := range args {
		b.WriteString(" 'x")
		b.WriteString(shell.Escape(a))
		b.WriteByte('\'')
	}
	return b.String()
}

// runOpts tune run.
type runOpts struct {
	// idempotent scripts are retried when their call got no answer.
	idempotent bool
	// encoded scripts print their output base64-encoded (so bytes that are
	// not UTF-8 survive the JSON answer); run decodes it.
	encoded bool
	// dir is the working directory ("" the daemon's).
	dir string
}

// executeTimeout is the daemon-side bound of a command run with run when
// ctx has no deadline.
const executeTimeout = 10 * time.Minute

// run runs a fixed script of the provider's own through process/execute and
// returns its exit code and output (stdout and stderr together, unless the
// script encodes its stdout and silences its stderr).
func (b *Box) run(ctx context.Context, op, script string, args []string, o runOpts) (int, []byte, error) {
	if err := b.gone(op); err != nil {
		return -1, nil, err
	}
	u, err := b.tb(ctx, "/process/execute")
	if err != nil {
		return -1, nil, b.fail(ctx, op, err)
	}
	timeout := executeTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	secs := uint32(max(1, math.Ceil(timeout.Seconds())))
	req := map[string]any{"command": commandLine(decodeArgs+script, args...), "timeout": secs}
	if o.dir != "" {
		req["cwd"] = o.dir
	}
	body, err := jsonBody(req)
	if err != nil {
		return -1, nil, providers.E(providers.Invalid, op, err).WithBox(b.id)
	}
	var out struct {
		ExitCode *int   `json:"exitCode"`
		Code     *int   `json:"code"` // older daemons
		Result   string `json:"result"`
	}
	err = b.p.c.json(ctx, request{method: http.MethodPost, url: u, body: body, contentType: "application/json", idempotent: o.idempotent}, &out)
	if err != nil {
		if statusOf(err) == http.StatusRequestTimeout {
			return -1, nil, providers.E(providers.Timeout, op, err).WithBox(b.id)
		}
		return -1, nil, b.fail(ctx, op, err)
	}
	code := -1
	switch {
	case out.ExitCode != nil:
		code = *out.ExitCode
	case out.Code != nil:
		code = *out.Code
	}
	if code < 0 {
		return -1, nil, providers.Errorf(providers.Unknown, op, "the toolbox could not run the command: %s", strings.TrimSpace(out.Result)).WithBox(b.id)
	}
	res := []byte(out.Result)
	if o.encoded && code == 0 {
		dec, err := base64.StdEncoding.DecodeString(string(bytes.Join(bytes.Fields(res), nil)))
		if err != nil {
			return -1, nil, providers.Errorf(providers.Unknown, op, "the script's output is not base64: %v", err).WithBox(b.id)
		}
		res = dec
	}
	return code, res, nil
}

// fail classifies a failed toolbox call: when the sandbox has gone or
// ended, Gone; else the call's own error.
func (b *Box) fail(ctx context.Context, op string, err error) error {
	e := wrap(op, b.id, err)
	switch e.Code {
	case providers.Aborted, providers.Timeout, providers.Auth:
		return e
	}
	if b.ended(ctx) {
		e.Code = providers.Gone
	}
	return e
}
