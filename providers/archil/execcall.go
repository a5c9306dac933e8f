package archil

import (
	"context"
	"net/http"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// execResult is the vendor's ExecDiskResult.
type execResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Timing   struct {
		TotalMs   int64 `json:"totalMs"`
		QueueMs   int64 `json:"queueMs"`
		ExecuteMs int64 `json:"executeMs"`
	} `json:"timing"`
}

// post sends one exec call. It counts for st as billed unless it was
// refused (a 4xx answer other than 504's timeout, which ran).
func (p *Provider) post(ctx context.Context, disk string, st *boxState, command string) (execResult, error) {
	var res execResult
	_, err := p.c.control(ctx, http.MethodPost, "/api/disks/"+disk+"/exec", nil, map[string]string{"command": command}, &res, false)
	if err == nil {
		if st != nil {
			st.calls.Add(1)
		}
		return res, nil
	}
	if s := statusOf(err); st != nil && (s == 0 || s >= 500) {
		st.calls.Add(1)
	}
	return res, wrap("archil.exec", "", err)
}

// maintain runs an idempotent command of boxfs's own on the disk (no
// wrapper, no checkout), retried when no answer came, and returns its
// stdout; an exit other than 0 is an error.
func (p *Provider) maintain(ctx context.Context, disk string, st *boxState, op, command string) (string, error) {
	for attempt := 1; ; attempt++ {
		res, err := p.post(ctx, disk, st, command)
		if err == nil && res.ExitCode == 0 {
			return res.Stdout, nil
		}
		if err == nil {
			return "", providers.Errorf(providers.Unknown, op, "boxfs's command exited %d: %s", res.ExitCode, clip(res.Stderr))
		}
		// No answer, a 429 or a 5xx: send it again. A 504 ran into the
		// platform's limit, and would again.
		if s := statusOf(err); s != 0 && (!retryableStatus(s) || s == http.StatusGatewayTimeout) || attempt >= maxTries || ctx.Err() != nil {
			return "", wrap(op, "", err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return "", wrap(op, "", err)
		}
	}
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}
