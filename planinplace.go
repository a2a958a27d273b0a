package floodgate

import "context"

// planKeeper is implemented by limiters whose keys' state stays in place
// when a key's plan changes (redisstore's: every plan's limiter on one
// prefix, each key's state in one Redis key), and which convert that
// state themselves: AllowPlanN decides n units for key under this
// limiter's plan, converting a state last written under another plan's
// rate as how says (PlanConfig.Inherit).
type planKeeper interface {
	AllowPlanN(ctx context.Context, key string, n int, how Inherit) (Decision, error)
}

// allowInPlace decides n units for key on slot's limiter, which keeps the
// key's state in place (slot.mover is nil): converted as PlanConfig.Inherit
// says if the limiter can (planKeeper), read as it stands otherwise.
func (p *PlanLimiter) allowInPlace(ctx context.Context, slot *planSlot, key string, n int) (Decision, error) {
	if k, ok := slot.lim.(planKeeper); ok {
		return k.AllowPlanN(ctx, key, n, p.cfg.Inherit)
	}
	return slot.lim.AllowN(ctx, key, n)
}
