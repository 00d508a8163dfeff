# The tailhouse image: `serve`, `ingest`, `migrate` and the other commands (compose.yaml runs them).
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY bin ./bin
COPY core ./core
COPY ingest ./ingest
COPY src ./src
COPY sql ./sql
COPY web ./web
COPY tsconfig.json ./
# The CLI's bundle of the sources (bin/bundle.js), built here so that no container builds it at start.
RUN node bin/bundle.js
ENV NODE_ENV=production DATA_DIR=/data
# Every command refuses a DATA_DIR that other users may reach (docs/reference/modes.md): a volume
# takes the mode of the image's directory when it is created, so this one starts private to root,
# the user the commands run as.
RUN mkdir -m 700 /data
VOLUME /data
EXPOSE 3000
ENTRYPOINT ["node", "bin/tailhouse.js"]
CMD ["serve"]
