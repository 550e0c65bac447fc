//! Outbound HTTP clients (model backends, test clients) with one TLS setup:
//! rustls on the `ring` provider, which builds in seconds where the default
//! provider needs a long C build.

use std::sync::Once;

static PROVIDER: Once = Once::new();

/// A reqwest client builder with the crypto provider installed.
pub fn client_builder() -> reqwest::ClientBuilder {
    PROVIDER.call_once(|| {
        // Err means another provider was installed first: that one serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}
