package dev.flatpull.fetcher.registry;

import dev.flatpull.config.ConfigException;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.config.RegistryHosts;
import dev.flatpull.fetcher.reference.ImageReference;
import java.time.InstantSource;

/**
 * Creates {@link RegistryClient}s that share one connection pool, one token cache and one concurrency bound. Create
 * one per process; close it at shutdown. Thread-safe.
 */
public final class RegistryClients implements AutoCloseable {
  private final RegistryHttp http;
  private final FetchLimits limits;

  public RegistryClients(
      FlatpullConfig config, RegistryCredentials credentials, FetchListener listener, Sleeper sleeper,
      InstantSource clock) {
    RegistryHosts hosts =
        new RegistryHosts(config.registry().hostsDirectory(), config.registry().plainHttp());
    this.http = new RegistryHttp(config.registry(), hosts, credentials, listener, sleeper, clock);
    this.limits = config.limits();
  }

  /** Clients configured from {@code config}, reading credentials from its credentials file. */
  public static RegistryClients create(FlatpullConfig config, FetchListener listener) throws ConfigException {
    RegistryCredentials creds =
        config.registry().credentialsFile().isPresent()
            ? RegistryCredentials.load(config.registry().credentialsFile().get())
            : RegistryCredentials.NONE;
    return new RegistryClients(config, creds, listener, Sleeper.SYSTEM, InstantSource.system());
  }

  /** A client for the repository of {@code reference} (its tag and digest are ignored). */
  public RegistryClient client(ImageReference reference) {
    return new RegistryClient(http, reference.registry(), reference.repository(), limits);
  }

  @Override
  public void close() {
    http.close();
  }
}
