package tasks

import "switchyard/bus"

// BusHandler routes the envelopes addressed to this instance: the owner
// side takes assign, cancel and replace; the requester side takes the rest.
func BusHandler(o *Owner, t *Tracker, m *Metrics) bus.Handler {
	return func(e *bus.Envelope) {
		switch e.Kind {
		case bus.KindAssign, bus.KindCancel, bus.KindReplace:
			o.HandleEnvelope(e)
		default:
			if !t.Deliver(e) {
				m.dropped.WithLabelValues(e.Kind.String()).Inc()
			}
		}
	}
}
