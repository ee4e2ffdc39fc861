package startstop_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/internal/startstop"
)

type svc struct {
	startstop.Base
	cause error
}

func (s *svc) Start(ctx context.Context) error {
	ctx, ok, started, stopped := s.StartInit(ctx)
	if !ok {
		return nil
	}
	go func() {
		started()
		defer stopped()
		<-ctx.Done()
		s.cause = context.Cause(ctx)
	}()
	return nil
}

func TestBase(t *testing.T) {
	t.Parallel()

	t.Run("StopNeverStarted", func(t *testing.T) {
		t.Parallel()
		var s svc
		s.Stop()
		s.Stop()
		<-s.Started()
	})

	t.Run("StopCancelsWithErrStop", func(t *testing.T) {
		t.Parallel()
		var s svc
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-s.Started()
		s.Stop()
		s.Stop()
		if !errors.Is(s.cause, startstop.ErrStop) {
			t.Fatalf("cause = %v", s.cause)
		}
	})

	t.Run("Stress", func(t *testing.T) {
		t.Parallel()
		var s svc
		var wg sync.WaitGroup
		deadline := time.Now().Add(200 * time.Millisecond)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					_ = s.Start(context.Background())
					s.Stop()
				}
			}()
		}
		wg.Wait()
		s.Stop()
	})
}
