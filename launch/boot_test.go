package launch

import (
	"fmt"
	"os/exec"
	"sync"
	"testing"
)

// Boots that find the sh supervisor not yet installed install it at
// once, each under its own name renamed over the shared one: none of
// them removes the copy another is about to run.
func TestBootsInstallTogether(t *testing.T) {
	for round := range 5 {
		tmp := t.TempDir()
		var wg sync.WaitGroup
		errs := make([]string, 12)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := exec.Command("sh", "-c", bootScript, "boxfs-launch", supervisorScript, scriptHash, tmp, "list", "-").CombinedOutput()
				if err != nil {
					errs[i] = fmt.Sprintf("%v: %s", err, out)
				}
			}()
		}
		wg.Wait()
		for i, e := range errs {
			if e != "" {
				t.Errorf("round %d, boot %d: %s", round, i, e)
			}
		}
	}
}
