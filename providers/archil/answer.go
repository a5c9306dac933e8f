package archil

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// answer is what a wrapper said.
type answer struct {
	state    string // gone, dup, busy, rc, fail
	rc       int
	why      string
	out, err []byte
	inline   bool
}

// parseAnswer reads the wrapper's "boxfs:" lines from a call's stdout
// (other lines are not the wrapper's). ok is false when no line says how
// the command went or a status or output line is malformed.
func parseAnswer(stdout string) (answer, bool) {
	var a answer
	for _, line := range strings.Split(stdout, "\n") {
		rest, ok := strings.CutPrefix(line, "boxfs:")
		if !ok {
			continue
		}
		word, arg, _ := strings.Cut(rest, " ")
		switch word {
		case "gone", "dup", "busy", "fail":
			a.state = word
		case "rc":
			n, why, _ := strings.Cut(arg, " ")
			rc, err := strconv.Atoi(n)
			if err != nil || rc < 0 || rc > 255 {
				return a, false
			}
			a.state, a.rc, a.why = "rc", rc, strings.TrimSpace(why)
		case "out", "err":
			data, err := base64.StdEncoding.DecodeString(arg)
			if err != nil {
				return a, false
			}
			if word == "out" {
				a.out, a.inline = data, true
			} else {
				a.err = data
			}
		}
	}
	return a, a.state != ""
}

// cmdKey is the object of a command's file name (run, out, err, rc), in
// the directory the command makes and owns.
func (b *Box) cmdKey(cid, name string) string { return cmdsDir + "/" + b.id + "/" + cid + "/" + name }

// killKey is the object that asks a command to stop: beside its directory,
// which the command owns while it runs, so that the host may write it.
func (b *Box) killKey(cid string) string { return cmdsDir + "/" + b.id + "/" + cid + ".kill" }

// askKill writes the command's .kill object, which its watcher acts on.
func (b *Box) askKill(ctx context.Context, cid string) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return b.p.c.putObject(kctx, b.disk, b.killKey(cid), strings.NewReader("kill\n"), 5)
}

// status reads a command's status object.
func (b *Box) status(ctx context.Context, cid string) (answer, bool, error) {
	resp, err := b.p.c.getObject(context.WithoutCancel(ctx), b.disk, b.cmdKey(cid, "rc"), nil)
	if statusOf(err) == http.StatusNotFound {
		return answer{}, false, nil
	}
	if err != nil {
		return answer{}, false, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return answer{}, false, err
	}
	a, ok := parseAnswer("boxfs:rc " + strings.TrimSpace(string(data)))
	if !ok {
		return answer{}, false, fmt.Errorf("archil: command status object %q", data)
	}
	return a, true, nil
}

// started reports whether a command's wrapper got as far as marking it.
func (b *Box) started(ctx context.Context, cid string) (bool, error) {
	resp, err := b.p.c.getObject(context.WithoutCancel(ctx), b.disk, b.cmdKey(cid, "run"), nil)
	if statusOf(err) == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return true, nil
}

// recordGone reports whether the box's record is known to be gone (a
// failure to read it says nothing).
func (b *Box) recordGone(ctx context.Context) bool {
	if b.st.ended.Load() {
		return true
	}
	_, err := b.p.readRecord(context.WithoutCancel(ctx), b.disk, b.id)
	return statusOf(err) == http.StatusNotFound
}
