//! The messages of `ratelimit/config/ratelimit/v3/rls_conf.proto`
//! (envoyproxy/go-control-plane), as an xDS server sends them: the proto's
//! field numbers, nothing added. Fields a newer server sends and these do
//! not name are skipped as protobuf skips unknown fields.

/// The xDS resource type of a [`RateLimitConfig`].
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// One domain's configuration (`RateLimitConfig`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitConfig {
    /// The resource's name, unique among the resources of a response.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The domain the descriptors belong to.
    #[prost(string, tag = "2")]
    pub domain: String,
    /// The domain's descriptors.
    #[prost(message, repeated, tag = "3")]
    pub descriptors: Vec<RateLimitDescriptor>,
}

/// A descriptor, as the YAML's `descriptors` entries.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    /// `key`.
    #[prost(string, tag = "1")]
    pub key: String,
    /// `value` (empty: any value).
    #[prost(string, tag = "2")]
    pub value: String,
    /// `rate_limit`.
    #[prost(message, optional, tag = "3")]
    pub rate_limit: Option<RateLimitPolicy>,
    /// Nested `descriptors`.
    #[prost(message, repeated, tag = "4")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// `shadow_mode`.
    #[prost(bool, tag = "5")]
    pub shadow_mode: bool,
    /// `detailed_metric`.
    #[prost(bool, tag = "6")]
    pub detailed_metric: bool,
    /// `quota_mode`.
    #[prost(bool, tag = "7")]
    pub quota_mode: bool,
    // Field 8, `metadata` (a Struct the service does not read), is skipped.
}

/// A `rate_limit` block (`RateLimitPolicy`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitPolicy {
    /// `unit`, a `RateLimitUnit` number (0: UNKNOWN).
    #[prost(int32, tag = "1")]
    pub unit: i32,
    /// `requests_per_unit`.
    #[prost(uint32, tag = "2")]
    pub requests_per_unit: u32,
    /// `unlimited`.
    #[prost(bool, tag = "3")]
    pub unlimited: bool,
    /// `name`.
    #[prost(string, tag = "4")]
    pub name: String,
    /// `replaces`.
    #[prost(message, repeated, tag = "5")]
    pub replaces: Vec<RateLimitReplace>,
}

/// One entry of `replaces` (`RateLimitReplace`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitReplace {
    /// The name of the limit replaced.
    #[prost(string, tag = "1")]
    pub name: String,
}
