//! Single-core synchronisation. Nothing here is `Send`: these types live on one core.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// A generation counter that tasks can wait on: `notify_all` bumps the generation and wakes
/// every waiter. Waiting for "a change after generation g" never misses a notification that
/// happened between reading `g` and starting to wait. Lives on one core.
#[derive(Default)]
pub struct Notify {
    generation: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl Notify {
    /// A new notifier at generation 0.
    pub fn new() -> Rc<Notify> {
        Rc::new(Notify::default())
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    /// Bumps the generation and wakes every waiter.
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        for w in self.waiters.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Resolves once the generation differs from `seen`.
    pub fn changed_since(&self, seen: u64) -> Changed<'_> {
        Changed { notify: self, seen }
    }
}

/// Future returned by [`Notify::changed_since`].
pub struct Changed<'a> {
    notify: &'a Notify,
    seen: u64,
}

impl Future for Changed<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.generation.get() != self.seen {
            return Poll::Ready(());
        }
        let mut waiters = self.notify.waiters.borrow_mut();
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// A counting semaphore for bounding work on one core (in-flight requests, buffer memory).
pub type Semaphore = glommio::sync::Semaphore;

/// A permit of a [`Semaphore`] held through an `Rc`, released on drop.
pub type StaticPermit = glommio::sync::StaticPermit;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_wakes_waiters_and_never_misses() {
        let ex = glommio::LocalExecutorBuilder::default().make().unwrap();
        ex.run(async {
            let n = Notify::new();
            let seen = n.generation();
            n.notify_all();
            // Already changed: resolves immediately.
            n.changed_since(seen).await;
            let seen = n.generation();
            let n2 = n.clone();
            let t = glommio::spawn_local(async move {
                n2.changed_since(seen).await;
                7
            });
            glommio::yield_if_needed().await;
            n.notify_all();
            assert_eq!(t.await, 7);
        });
    }
}
