//! openraft's `AsyncRuntime` over Borges' runtime (glommio underneath), so the Raft node runs on
//! a glommio executor beside the data cores.
//!
//! openraft 0.9 needs from a runtime only task spawning, sleeps, timeouts, an instant, a
//! thread-local RNG and one-shot channels; everything else it uses (`tokio::sync` channels,
//! `select!`) works on any executor. With the `singlethreaded` feature nothing needs to be
//! `Send`, and `spawn` must start a local task: [`borges_runtime::side::spawn_detached`], whose
//! handle, like tokio's, does not cancel the task when dropped (openraft drops some handles and
//! expects the tasks to go on).

use std::fmt;
use std::future::Future;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use borges_runtime::side::{spawn_detached, JoinHandle, Sleep};
use openraft::async_runtime::TokioOneShotSender;

/// The runtime type parameter of the Raft type configuration: glommio through
/// `borges_runtime`. Every task it spawns lives on the executor that spawned it.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct GlommioRuntime;

/// A monotonic instant (`std::time::Instant`; glommio's timers use the same clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RaftInstant(std::time::Instant);

impl Add<Duration> for RaftInstant {
    type Output = RaftInstant;
    fn add(self, rhs: Duration) -> RaftInstant {
        RaftInstant(self.0 + rhs)
    }
}

impl AddAssign<Duration> for RaftInstant {
    fn add_assign(&mut self, rhs: Duration) {
        self.0 += rhs;
    }
}

impl Sub<Duration> for RaftInstant {
    type Output = RaftInstant;
    fn sub(self, rhs: Duration) -> RaftInstant {
        RaftInstant(self.0 - rhs)
    }
}

impl Sub<RaftInstant> for RaftInstant {
    type Output = Duration;
    fn sub(self, rhs: RaftInstant) -> Duration {
        self.0.saturating_duration_since(rhs.0)
    }
}

impl SubAssign<Duration> for RaftInstant {
    fn sub_assign(&mut self, rhs: Duration) {
        self.0 -= rhs;
    }
}

impl openraft::Instant for RaftInstant {
    fn now() -> Self {
        RaftInstant(std::time::Instant::now())
    }
}

/// A spawned task ended without output: its executor cancelled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinError;

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("task cancelled before it finished")
    }
}

/// The handle of a task spawned by openraft.
pub struct RaftJoinHandle<T>(JoinHandle<T>);

impl<T> Future for RaftJoinHandle<T> {
    type Output = Result<T, JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|out| out.ok_or(JoinError))
    }
}

/// A deadline passed before the future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

/// `future` raced against a sleep.
pub struct Timeout<F> {
    future: Pin<Box<F>>,
    sleep: Sleep,
}

impl<R, F: Future<Output = R>> Future for Timeout<F> {
    type Output = Result<R, Elapsed>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(out) = self.future.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        match Pin::new(&mut self.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A sleep future openraft can name.
pub struct RaftSleep(Sleep);

impl Future for RaftSleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl openraft::AsyncRuntime for GlommioRuntime {
    type JoinError = JoinError;
    type JoinHandle<T: 'static> = RaftJoinHandle<T>;
    type Sleep = RaftSleep;
    type Instant = RaftInstant;
    type TimeoutError = Elapsed;
    type Timeout<R, T: Future<Output = R>> = Timeout<T>;
    type ThreadLocalRng = rand::rngs::ThreadRng;
    type OneshotSender<T> = TokioOneShotSender<T>;
    type OneshotReceiverError = tokio::sync::oneshot::error::RecvError;
    type OneshotReceiver<T> = tokio::sync::oneshot::Receiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + 'static,
        T::Output: 'static,
    {
        RaftJoinHandle(spawn_detached(future))
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        RaftSleep(Sleep::new(duration))
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        RaftSleep(Sleep::until(deadline.0))
    }

    fn timeout<R, F: Future<Output = R>>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        Timeout {
            future: Box::pin(future),
            sleep: Sleep::new(duration),
        }
    }

    fn timeout_at<R, F: Future<Output = R>>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        Timeout {
            future: Box::pin(future),
            sleep: Sleep::until(deadline.0),
        }
    }

    fn is_panic(_join_error: &Self::JoinError) -> bool {
        // A panicking glommio task unwinds its executor thread; a join error is a cancellation.
        false
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        rand::thread_rng()
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (TokioOneShotSender(tx), rx)
    }
}
