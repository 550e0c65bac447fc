//! The assistant scenario.

pub mod assistant;
pub mod jsonseq;
pub mod parts;
pub mod skills;
