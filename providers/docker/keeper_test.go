package docker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// A program in the box cannot end the box: kill -9 -1 (every process it may
// signal) and a kill of every sleep end what they reach, and the box still
// runs and answers. Orphans the box's programs leave are reaped, not left
// as zombies.
func TestBoxOutlivesKillsFromInside(t *testing.T) {
	p := newProvider(t)
	for _, img := range []string{"", "boxfs-busybox:latest"} {
		t.Run("image="+img, func(t *testing.T) {
			b := create(t, p, providers.Spec{Image: img, Lifetime: 10 * time.Minute})
			ctx := testCtx(t)
			killSleeps := `for d in /proc/[0-9]*; do read -r c < "$d/comm" 2>/dev/null || continue; [ "$c" = sleep ] && kill -9 "${d#/proc/}"; done; echo done`
			for _, script := range []string{"kill -9 -1; echo survived", killSleeps, "kill -TERM -1; kill -9 1; echo survived"} {
				var out strings.Builder
				proc, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", script}, Stdout: &out})
				if err != nil {
					t.Fatalf("Exec %q: %v", script, err)
				}
				proc.Wait()
				time.Sleep(300 * time.Millisecond) // a dying box would have exited by now
				st, err := b.Status(ctx)
				if err != nil || st.State != providers.StateRunning {
					t.Fatalf("after %q (printed %q) the box is %+v, %v; want running", script, out.String(), st, err)
				}
				if got := run(t, ctx, b, providers.ExecRequest{Argv: []string{"echo", "ok"}}); got != "ok\n" {
					t.Fatalf("exec after %q printed %q", script, got)
				}
			}

			// An orphan (its parent exits at once) is reaped when it ends.
			run(t, ctx, b, providers.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.3 & exit 0"}})
			zombies := `n=0; for d in /proc/[0-9]*; do read -r s < "$d/stat" 2>/dev/null || continue; s=${s##*) }; case $s in Z*) n=$((n+1)) ;; esac; done; echo $n`
			deadline := time.Now().Add(10 * time.Second)
			for {
				got := strings.TrimSpace(run(t, ctx, b, providers.ExecRequest{Argv: []string{"sh", "-c", zombies}}))
				if got == "0" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s zombies left in the box 10 s after an orphan ended", got)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}
