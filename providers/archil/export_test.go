package archil

import "time"

// SetClock gives tests the provider's clock.
func SetClock(p *Provider, now func() time.Time) { p.now = now }
