/// An encoded key state, ready to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded(Vec<u8>);

impl Encoded {
    /// The bytes to store.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}
