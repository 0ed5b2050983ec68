package reload

import (
	"context"
	"errors"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/internal/printable"
)

// LoadStart loads the configuration's module chain. If it does not
// load and some of its modules say failurePolicy Builtin, those stages
// start on their builtin module instead (the Reloader tries the
// configured ones again when their files change); with KeepLastGood there
// is nothing to keep at start, and the error stops wasp.
func LoadStart(ctx context.Context, l chain.Loader, c *v1alpha1.WaspConfiguration, specs []chain.Spec) (*chain.Chain, error) {
	ch, err := l.Load(ctx, specs)
	if err == nil || ctx.Err() != nil {
		return ch, err
	}
	builtin := map[abi.Stage]bool{}
	if c != nil {
		for _, m := range c.Modules {
			if m.FailurePolicy == v1alpha1.Builtin {
				stage, _ := abi.ParseStage(m.Stage)
				builtin[stage] = true
			}
		}
	}
	if len(builtin) == 0 {
		return nil, err
	}
	var kept []chain.Spec
	for _, s := range specs {
		if !builtin[s.Stage] {
			kept = append(kept, s)
		}
	}
	klog.FromContext(ctx).Error(printable.Error(err), "Modules did not load; the stages whose failurePolicy is Builtin start on the builtin module")
	ch, ferr := l.Load(ctx, kept)
	if ferr != nil {
		return nil, errors.Join(err, ferr)
	}
	return ch, nil
}
